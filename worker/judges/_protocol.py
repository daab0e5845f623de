"""The judge protocol: anything awaitable that maps a request to a response."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._wire import JudgeRequest, JudgeResponse

__all__ = ["Judge", "validates_replies"]


@runtime_checkable
class Judge(Protocol):
    """``async __call__(request) -> response``. Must not block the event loop.

    Raise :class:`~worker.judges.JudgeError` for transport/HTTP failures and
    :class:`~worker.judges.InvalidReply` for replies that arrived but are unusable.

    The evaluator applies :func:`~worker.judges.validate_response` to whatever a judge returns,
    unless the judge has an attribute ``validates_replies`` that is ``True``: its promise that every
    response it returns was validated against the very request it answers (the wire judges do,
    raising ``InvalidReply`` otherwise). A subclass that overrides ``__call__`` inherits that
    promise and must keep it.
    """

    async def __call__(self, request: JudgeRequest) -> JudgeResponse: ...


def validates_replies(judge: object) -> bool:
    """Whether ``judge`` promises validated replies (its ``validates_replies`` is ``True``)."""
    return getattr(judge, "validates_replies", False) is True
