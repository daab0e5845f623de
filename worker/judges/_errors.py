"""Judge exceptions. Messages are short codes or HTTP facts; never keys, bodies or model output."""

from __future__ import annotations

from ._wire import Usage

__all__ = ["InvalidReply", "JudgeError"]


class JudgeError(Exception):
    """A request failed before a usable reply arrived (transport error or HTTP error status).

    ``status`` is the HTTP status (``None`` for transport errors); ``retryable`` says whether the
    failure is transient (connect/read errors, timeouts, 408, 429, 529, 5xx) or permanent.
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class InvalidReply(Exception):
    """A reply arrived but fails strict validation. Keeps what could be read for accounting."""

    def __init__(
        self, model: str | None, usage: Usage | None, code: str = "INVALID_RESPONSE"
    ) -> None:
        super().__init__(code)
        self.model = model
        self.usage = usage
        self.code = code
