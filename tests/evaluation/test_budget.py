"""One total budget, TIMEOUT bookkeeping and cancellation (docs/semantics.md §6.2).

Expiry is made certain with judges that block on an event that is never set; budgets are small
and real, and time assertions only use upper bounds with a 50 ms margin.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import pytest

from tests.evaluation.engine_kit import BlockingJudge, Probe, ScriptedJudge, answer_all, make_trace
from worker.evaluation import Evaluator, Limits, MetricResult, Reason, Status, Trace
from worker.judges import JudgeError, JudgeRequest, JudgeResponse, remaining_s

BUDGET_S = 0.2
MARGIN_S = 0.05
TIMEOUT = MetricResult.error(Reason.TIMEOUT)
DECIDED = MetricResult(status=Status.DECIDED, score=1.0, passed=True, reason="DECIDED")


def _three_groups() -> list[Probe]:
    """Five metrics: groups A (a1, a2), B (b), C (c) and one deterministic metric."""
    return [
        Probe("a1", state_value={"k": "A"}),
        Probe("b", state_value={"k": "B"}),
        Probe("det", questions_value={}, reducer=lambda answers, trace: DECIDED),
        Probe("a2", state_value={"k": "A"}),
        Probe("c", state_value={"k": "C"}),
    ]


@pytest.mark.asyncio
async def test_timeout_on_first_group_returns_report() -> None:
    """On expiry the in-flight request is cancelled and unfinished metrics are TIMEOUT."""
    judge = BlockingJudge()
    evaluator = Evaluator(judge, _three_groups(), Limits(budget_s=BUDGET_S))
    started = time.monotonic()
    report = await evaluator.evaluate(make_trace())
    elapsed_s = time.monotonic() - started
    assert [e.result for e in report.results] == [TIMEOUT, TIMEOUT, DECIDED, TIMEOUT, TIMEOUT]
    assert (report.requests, report.usage, judge.calls, judge.cancelled) == (1, (), 1, 1)
    assert BUDGET_S <= report.elapsed_s < BUDGET_S + MARGIN_S
    assert elapsed_s < BUDGET_S + MARGIN_S


@pytest.mark.asyncio
async def test_finished_groups_are_kept_on_timeout() -> None:
    """Earlier groups' results, prechecks and deterministic results survive a timeout."""
    judge = BlockingJudge(answered=1)
    metrics = [*_three_groups(), Probe("pre", early=DECIDED)]
    report = await Evaluator(judge, metrics, Limits(budget_s=BUDGET_S)).evaluate(make_trace())
    statuses = {e.id: e.result for e in report.results}
    assert statuses["a1"].status is Status.DECIDED
    assert statuses["a2"].status is Status.DECIDED
    assert (statuses["det"], statuses["pre"]) == (DECIDED, DECIDED)
    assert (statuses["b"], statuses["c"]) == (TIMEOUT, TIMEOUT)
    assert (report.requests, len(report.usage), judge.calls, judge.cancelled) == (2, 1, 2, 1)


@pytest.mark.asyncio
async def test_one_deadline_for_all_groups() -> None:
    """Time used by earlier groups counts: the whole sequence shares a single deadline."""
    calls: list[float] = []

    async def judge(request: JudgeRequest) -> JudgeResponse:
        calls.append(time.monotonic())
        if len(calls) == 1:
            await asyncio.sleep(0.1)  # the first group uses half the budget
            return answer_all(request)
        await asyncio.Event().wait()  # the second group blocks until cancelled
        raise AssertionError("unreachable")

    metrics = [Probe("a", state_value={"k": 1}), Probe("b", state_value={"k": 2})]
    report = await Evaluator(judge, metrics, Limits(budget_s=BUDGET_S)).evaluate(make_trace())
    assert report.result("a").status is Status.DECIDED
    assert report.result("b") == TIMEOUT
    assert report.requests == 2
    # A per-group budget would have let the second group run a full BUDGET_S on its own.
    assert report.elapsed_s < BUDGET_S + MARGIN_S


@pytest.mark.asyncio
async def test_planning_time_counts_against_budget() -> None:
    """The deadline starts when evaluate starts, so slow planning leaves less time for requests."""

    class SlowState(Probe):
        def state(self, trace: Trace) -> Any:
            time.sleep(0.1)  # a slow, synchronous metric definition
            return super().state(trace)

    judge = BlockingJudge()
    report = await Evaluator(judge, [SlowState("m")], Limits(budget_s=BUDGET_S)).evaluate(
        make_trace()
    )
    assert report.result("m") == TIMEOUT
    assert report.requests == 1
    assert report.elapsed_s < BUDGET_S + MARGIN_S


@pytest.mark.asyncio
async def test_budget_exhausted_by_planning_gives_zero_requests() -> None:
    """If planning uses the whole budget, unfinished metrics are TIMEOUT and nothing is sent."""

    class SlowState(Probe):
        def state(self, trace: Trace) -> Any:
            time.sleep(0.08)
            return super().state(trace)

    judge = ScriptedJudge()
    metrics = [
        SlowState("slow"),
        Probe("pre", early=DECIDED),
        Probe("det", questions_value={}, reducer=lambda answers, trace: DECIDED),
        Probe("skip", state_value={"big": "x" * 100}),
    ]
    report = await Evaluator(judge, metrics, Limits(budget_s=0.05, max_state_chars=50)).evaluate(
        make_trace()
    )
    assert [e.result for e in report.results] == [
        TIMEOUT,
        DECIDED,
        DECIDED,
        MetricResult.skipped(Reason.EVALUATION_LIMIT),
    ]
    assert (report.requests, report.usage, judge.requests) == (0, (), [])


@pytest.mark.asyncio
async def test_no_group_starts_after_the_deadline() -> None:
    """A group whose turn comes after the deadline is never started; earlier results stay."""

    def slow_reduce(answers: Mapping[str, Any], trace: Trace) -> MetricResult:
        time.sleep(0.15)  # synchronous work that runs past the deadline without yielding
        return DECIDED

    judge = ScriptedJudge()
    metrics = [
        Probe("a", state_value={"k": 1}, reducer=slow_reduce),
        Probe("b", state_value={"k": 2}),
    ]
    report = await Evaluator(judge, metrics, Limits(budget_s=0.1)).evaluate(make_trace())
    assert (report.result("a"), report.result("b")) == (DECIDED, TIMEOUT)
    assert (report.requests, len(judge.requests)) == (1, 1)


@pytest.mark.asyncio
async def test_groups_run_strictly_one_at_a_time() -> None:
    """At most one request is in flight per evaluation."""
    in_flight, peak = 0, 0

    async def judge(request: JudgeRequest) -> JudgeResponse:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.005)
        in_flight -= 1
        return answer_all(request)

    metrics = [Probe(f"m{i}", state_value={"k": i}) for i in range(4)]
    report = await Evaluator(judge, metrics).evaluate(make_trace())
    assert (report.requests, peak) == (4, 1)


@pytest.mark.asyncio
async def test_judge_deadline_shrinks_across_groups() -> None:
    """Each judge call sees the same absolute deadline, so the remaining time only shrinks."""
    seen: list[float] = []

    async def judge(request: JudgeRequest) -> JudgeResponse:
        left = remaining_s()
        assert left is not None
        seen.append(left)
        await asyncio.sleep(0.02)
        return answer_all(request)

    metrics = [Probe("a", state_value={"k": 1}), Probe("b", state_value={"k": 2})]
    await Evaluator(judge, metrics, Limits(budget_s=1.0)).evaluate(make_trace())
    assert len(seen) == 2
    assert 0 < seen[1] <= seen[0] - 0.02 <= 1.0


@pytest.mark.asyncio
async def test_external_cancel_propagates_without_further_groups() -> None:
    """Cancelling evaluate() cancels the in-flight request, raises, and starts no other group."""
    judge = BlockingJudge()
    evaluator = Evaluator(judge, _three_groups(), Limits(budget_s=5.0))
    task = asyncio.create_task(evaluator.evaluate(make_trace()))
    await asyncio.wait_for(judge.entered.wait(), timeout=2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)  # give a wrongly continuing evaluation a chance to start group 2
    assert (judge.calls, judge.cancelled) == (1, 1)


@pytest.mark.asyncio
async def test_outer_timeout_is_not_mistaken_for_the_budget() -> None:
    """A caller's shorter timeout propagates as the caller's error, not as a TIMEOUT report."""
    judge = BlockingJudge()
    evaluator = Evaluator(judge, _three_groups(), Limits(budget_s=5.0))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await evaluator.evaluate(make_trace())
    assert time.monotonic() - started < 0.1 + MARGIN_S
    assert (judge.calls, judge.cancelled) == (1, 1)


@pytest.mark.asyncio
async def test_own_budget_inside_a_longer_caller_timeout_returns_report() -> None:
    """The evaluator's own expiry inside a longer caller timeout still returns a report."""
    judge = BlockingJudge()
    evaluator = Evaluator(judge, _three_groups(), Limits(budget_s=BUDGET_S))
    async with asyncio.timeout(5.0):
        report = await evaluator.evaluate(make_trace())
    assert report.result("a1") == TIMEOUT
    assert report.requests == 1


class SwallowingJudge:
    """A badly behaved judge that turns its cancellation into a JudgeError."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = asyncio.Event()

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Block until cancelled, then swallow the cancellation."""
        self.calls += 1
        self.entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # the misbehaviour under test
            await asyncio.Event().wait()
        raise JudgeError("gave up")


@pytest.mark.asyncio
async def test_swallowed_timeout_is_still_timeout() -> None:
    """A judge swallowing the deadline's cancellation still yields TIMEOUT, not BACKEND_ERROR."""
    judge = SwallowingJudge()
    evaluator = Evaluator(judge, _three_groups(), Limits(budget_s=BUDGET_S))
    async with asyncio.timeout(2):  # a broken guard would otherwise block on the next group
        report = await evaluator.evaluate(make_trace())
    assert report.result("a1") == TIMEOUT
    assert report.result("b") == TIMEOUT
    assert (report.requests, judge.calls) == (1, 1)
    assert report.elapsed_s < BUDGET_S + MARGIN_S


@pytest.mark.asyncio
async def test_swallowed_external_cancel_still_propagates() -> None:
    """A judge swallowing the caller's cancellation cannot make evaluate report or continue."""
    judge = SwallowingJudge()
    evaluator = Evaluator(judge, _three_groups(), Limits(budget_s=5.0))
    task = asyncio.create_task(evaluator.evaluate(make_trace()))
    await asyncio.wait_for(judge.entered.wait(), timeout=2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)
    assert judge.calls == 1


@pytest.mark.asyncio
async def test_timeout_does_not_leak_cancellation_state() -> None:
    """After an evaluation times out, the calling task is not left half-cancelled."""
    evaluator = Evaluator(BlockingJudge(), [Probe("m")], Limits(budget_s=0.05))
    await evaluator.evaluate(make_trace())
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # would raise CancelledError if a cancel were still pending


@pytest.mark.asyncio
async def test_backend_error_does_not_stop_later_groups() -> None:
    """A failed group is not a timeout: the next group still runs within the budget."""

    def reply(request: JudgeRequest, call: int) -> Any:
        return JudgeError("HTTP 502", status=502) if call == 0 else answer_all(request)

    metrics = [Probe("a", state_value={"k": 1}), Probe("b", state_value={"k": 2})]
    report = await Evaluator(ScriptedJudge(reply=reply), metrics).evaluate(make_trace())
    assert report.result("a") == MetricResult.error(Reason.BACKEND_ERROR)
    assert report.result("b").status is Status.DECIDED
