"""The judge protocol: anything awaitable that maps a request to a response."""

from __future__ import annotations

import inspect
from typing import Protocol, runtime_checkable

from ._wire import JudgeRequest, JudgeResponse

__all__ = ["Judge", "check_async_judge", "validates_replies"]


@runtime_checkable
class Judge(Protocol):
    """``async __call__(request) -> response``. Must not block the event loop.

    Only async callables qualify (see :func:`check_async_judge`): a synchronous one would block
    the loop past any deadline, since nothing can interrupt it.

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


def check_async_judge(judge: object) -> None:
    """``TypeError`` unless ``judge`` is an async callable, naming what it got instead.

    Accepted: an ``async def`` function, a partial or bound method of one, or an instance whose
    class has ``async def __call__`` (``inspect.iscoroutinefunction`` is False for those, so the
    class's ``__call__`` is checked). A synchronous function that returns an awaitable is refused
    too: it may block before it returns. A wrapper judge calls this on what it wraps.
    """
    if inspect.iscoroutinefunction(judge):
        return
    if callable(judge) and inspect.iscoroutinefunction(type(judge).__call__):
        return
    kind = "synchronous" if callable(judge) else "non-callable"
    name = getattr(judge, "__qualname__", None) if inspect.isroutine(judge) else None
    what = f"function {name}" if name else type(judge).__name__
    raise TypeError(f"judge must be an async callable (async def __call__); got a {kind} {what}")
