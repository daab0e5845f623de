"""Which judges an Evaluator accepts: async callables only, refused at construction otherwise.

A synchronous judge would block the event loop past any budget (the engine cannot interrupt it),
so it is a ``TypeError`` before anything runs, not a slow TIMEOUT afterwards.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.evaluation.engine_kit import Probe, ScriptedJudge, answer_all, make_trace
from worker.evaluation import Evaluator, Limits, Status
from worker.judges import (
    ChatJudge,
    JudgeRequest,
    JudgeResponse,
    SyntheticJudge,
    SystemOneJudge,
    check_async_judge,
)
from worker.metrics import MeteredJudge

NOWHERE = "http://127.0.0.1:9"  # never contacted: construction sends nothing


class SyncJudge:
    """A judge whose ``__call__`` is synchronous (blocks the loop for as long as it runs)."""

    def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Answer synchronously."""
        return answer_all(request)


class AsyncJudge:
    """A judge instance with ``async def __call__``."""

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Answer asynchronously."""
        return answer_all(request)


class Holder:
    """Owns an async method used as a judge (a bound method)."""

    async def ask(self, request: JudgeRequest, p: float = 0.9) -> JudgeResponse:
        """Answer asynchronously with noul ``p``."""
        return answer_all(request, p)


async def async_judge(request: JudgeRequest, p: float = 0.9) -> JudgeResponse:
    """A plain async function judge."""
    return answer_all(request, p)


def returns_coroutine(request: JudgeRequest) -> Any:
    """A synchronous function that hands back an awaitable: still refused (it may block first)."""
    return async_judge(request)


@pytest.mark.parametrize(
    ("judge", "named"),
    [
        (answer_all, "synchronous function answer_all"),
        (SyncJudge(), "synchronous SyncJudge"),
        (returns_coroutine, "synchronous function returns_coroutine"),
        (functools.partial(answer_all, p=0.5), "synchronous partial"),
        (AsyncJudge, "synchronous type"),  # the class, not an instance
        (None, "non-callable NoneType"),
    ],
    ids=["function", "instance", "coroutine-returning-lambda", "partial", "class", "none"],
)
def test_non_async_judge_is_refused_at_construction(judge: Any, named: str) -> None:
    """Anything but an async callable is a TypeError naming the problem and the object."""
    with pytest.raises(TypeError, match="judge must be an async callable") as raised:
        Evaluator(judge, [Probe("m")], Limits(budget_s=0.3))
    assert named in str(raised.value)


@pytest.mark.parametrize(
    "judge",
    [
        AsyncJudge(),
        async_judge,
        functools.partial(async_judge, p=0.8),
        Holder().ask,
        ScriptedJudge(),
    ],
    ids=["async-call-instance", "async-function", "partial", "bound-method", "scripted"],
)
@pytest.mark.asyncio
async def test_async_judges_are_accepted_and_used(judge: Any) -> None:
    """Instances with async __call__, async functions, their partials and bound methods work."""
    report = await Evaluator(judge, [Probe("m")]).evaluate(make_trace())
    assert report.result("m").status is Status.DECIDED
    assert report.requests == 1


@pytest.mark.asyncio
async def test_every_judge_of_the_worker_is_accepted() -> None:
    """The worker's own judges (synthetic, System One, chat, the metered wrapper) all pass."""
    system_one = SystemOneJudge(base_url=NOWHERE, api_key="test-key")
    chat = ChatJudge.openai_compatible(NOWHERE, "test-model")
    metered = MeteredJudge(SyntheticJudge())
    try:
        for judge in (SyntheticJudge(), system_one, chat, metered, MeteredJudge(system_one)):
            assert Evaluator(judge, [Probe("m")]).metric_ids == ("m",)
    finally:
        await system_one.aclose()
        await chat.aclose()


def test_the_check_is_public_for_wrapper_judges() -> None:
    """check_async_judge (what the Evaluator uses) refuses a sync judge a wrapper was given."""
    with pytest.raises(TypeError, match="synchronous SyncJudge"):
        check_async_judge(SyncJudge())
    check_async_judge(AsyncJudge())  # returns None: accepted
