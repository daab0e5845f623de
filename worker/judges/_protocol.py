"""The judge protocol: anything awaitable that maps a request to a response."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._wire import JudgeRequest, JudgeResponse

__all__ = ["Judge"]


@runtime_checkable
class Judge(Protocol):
    """``async __call__(request) -> response``. Must not block the event loop.

    Raise :class:`~worker.judges.JudgeError` for transport/HTTP failures and
    :class:`~worker.judges.InvalidReply` for replies that arrived but are unusable.
    """

    async def __call__(self, request: JudgeRequest) -> JudgeResponse: ...
