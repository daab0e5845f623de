"""The System One (Jev) wire client (docs/semantics.md §7.3, AgentScope ``JevClient`` behaviour).

``POST {base}/v1/systemone`` with ``Authorization: Bearer <key>``. A 2xx body must pass the wire
model *and* the strict rules (docs/semantics.md §7.2), else :class:`InvalidReply` keeps whatever
model and usage could be read (so the evaluator still accounts for tokens that were billed). HTTP
and transport failures are :class:`JudgeError` (see :mod:`worker.judges._endpoint` for retries and
translation).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import ClassVar, Self

import httpx

from worker.canonical_json import compact_json

from ._endpoint import JsonEndpoint, check_api_key, check_base_url
from ._errors import InvalidReply
from ._retry import RetryPolicy
from ._strict import StrictJsonError, check_model, read_usage, strict_loads
from ._transport import DEFAULT_MAX_REPLY_BYTES
from ._validation import validate_response
from ._wire import JudgeRequest, JudgeResponse, Usage

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "SystemOneJudge", "decode_reply", "systemone_url"]

DEFAULT_BASE_URL = "https://api.typesafe.ai"
DEFAULT_MODEL = "jev-latest"
_PATH = "/v1/systemone"
_SERVICE = "System One"


def systemone_url(base_url: str) -> str:
    """The endpoint (semantics §7.3): trim ``/``; keep ``…/v1/systemone``; add ``/systemone`` to
    ``…/v1``; else add ``/v1/systemone``."""
    base = check_base_url(base_url)
    if base.endswith(_PATH):
        return base
    if base.endswith("/v1"):
        return base + "/systemone"
    return base + _PATH


def _accounting(raw: object) -> tuple[str | None, Usage | None]:
    """Model and usage as far as they can be read, for :class:`InvalidReply`."""
    if not isinstance(raw, dict):
        return None, None
    model = raw.get("model")
    usage = read_usage(raw.get("usage"), "input_tokens", "output_tokens")
    return (model if isinstance(model, str) and model.strip() else None), usage


def _parse(raw: object, usage: Usage | None) -> JudgeResponse:
    response = JudgeResponse.model_validate(raw)  # `null`, wrong types, extra keys fail here
    if response.usage is not None and usage is None:
        raise ValueError("usage counts out of range")  # pydantic accepts ints beyond int64
    return response


def decode_reply(request: JudgeRequest, body: bytes) -> JudgeResponse:
    """A validated response from a 2xx body, or :class:`InvalidReply` (no content in the error)."""
    try:
        raw = strict_loads(body.decode("utf-8"))
    except (UnicodeDecodeError, StrictJsonError):
        raise InvalidReply(None, None) from None
    model, usage = _accounting(raw)
    try:
        return validate_response(request, _parse(raw, usage))
    except ValueError:  # pydantic.ValidationError and InvalidResponse are ValueErrors
        raise InvalidReply(model, usage) from None


class SystemOneJudge:
    """``SystemOneJudge(base_url="https://api.typesafe.ai", api_key=…, model="jev-latest")``.

    A request-level ``model`` overrides the judge's; otherwise the judge's model is always sent.
    Owns (and closes) its HTTP client unless one is injected; use ``async with`` or
    :meth:`aclose`. The key never appears in ``repr`` or in any exception.
    """

    validates_replies = True  # every reply passes validate_response for its request, or raises
    DEFAULT_BASE_URL: ClassVar[str] = DEFAULT_BASE_URL
    """The service's base URL when none is given (also the worker's default)."""
    DEFAULT_MODEL: ClassVar[str] = DEFAULT_MODEL
    """The model asked for when none is given (also the worker's default)."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        model: str = DEFAULT_MODEL,
        client: httpx.AsyncClient | None = None,
        *,
        policy: RetryPolicy | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        on_response: Callable[[int], None] | None = None,
    ) -> None:
        key = check_api_key(api_key)  # printable ASCII, no spaces (as typesafe-sdk requires)
        self._model = check_model(model)
        self._url = systemone_url(base_url)
        headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        self._endpoint = JsonEndpoint(
            self._url,
            service=_SERVICE,
            headers=headers,
            client=client,
            policy=policy or RetryPolicy(),
            max_reply_bytes=max_reply_bytes,
            secrets=(key,),
            on_response=on_response,
        )

    @property
    def url(self) -> str:
        """The normalized endpoint URL."""
        return self._url

    @property
    def model(self) -> str:
        """The default model, sent when a request names none."""
        return self._model

    def __repr__(self) -> str:
        return f"SystemOneJudge(url={self._url!r}, model={self._model!r})"

    def _body(self, request: JudgeRequest) -> bytes:
        """``request.wire()`` with the model filled in, serialized (the frozen state as is)."""
        model = request.model if (request.model or "").strip() else self._model
        state, questions = request.state_json(), request.questions_json()
        body = f'{{"state":{state},"questions":{questions},"model":{compact_json(model)}}}'
        return body.encode("utf-8")

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Ask System One; a validated response, :class:`InvalidReply` or :class:`JudgeError`."""
        body = await self._endpoint.post(self._body(request))
        return decode_reply(request, body)

    async def aclose(self) -> None:
        """Close the HTTP client if this judge built it."""
        await self._endpoint.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
