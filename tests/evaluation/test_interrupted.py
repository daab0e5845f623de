"""An evaluation the caller stops from outside (a backstop): ``Progress`` + ``interrupted_report``.

The judge here ignores cancellation, the fault a backstop above the budget exists for: it answers
the first packed group, then keeps awaiting through every cancel until the test releases it.
Budgets are small and real; groups are sequential because their states disagree on ``k``.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from tests.evaluation.engine_kit import BlockingJudge, Probe, ScriptedJudge, answer_all, make_trace
from worker.evaluation import (
    Evaluator,
    Limits,
    MetricResult,
    Progress,
    Reason,
    Report,
    RequestUsage,
    Status,
)
from worker.judges import JudgeRequest, JudgeResponse, Usage

BUDGET_S = 0.2
BACKSTOP_S = BUDGET_S + 0.3  # the caller's own limit, above the engine's budget
TIMEOUT = MetricResult.error(Reason.TIMEOUT)
DECIDED = MetricResult(status=Status.DECIDED, score=1.0, passed=True, reason="DECIDED")
SKIPPED = MetricResult.skipped("NO_EVIDENCE")
FIRST_USAGE = RequestUsage(model="test-judge", usage=Usage(input_tokens=10, output_tokens=2))
UNKNOWN = RequestUsage(model=None, usage=None)


class StubbornJudge:
    """Answers the first ``answered`` requests, then ignores cancellation.

    A blocked call catches every ``CancelledError`` and keeps awaiting (the fault under test);
    it returns a valid response once ``release`` is set, or after ``cancels_to_return`` cancels.
    """

    def __init__(self, answered: int = 1, cancels_to_return: int | None = None) -> None:
        self.answered = answered
        self.cancels_to_return = cancels_to_return
        self.calls = 0
        self.cancels = 0
        self.release = asyncio.Event()

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Answer, or await ``release`` through every cancellation."""
        self.calls += 1
        if self.calls <= self.answered:
            await asyncio.sleep(0)
            return answer_all(request)
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancels += 1  # swallowed: the misbehaviour under test
                if self.cancels == self.cancels_to_return:
                    break
        return answer_all(request, usage=Usage(input_tokens=7, output_tokens=1))


def _metrics() -> list[Probe]:
    """Three sequential groups (k = A, B, C), a deterministic metric and a SKIPPED precheck."""
    return [
        Probe("a", state_value={"k": "A"}),
        Probe("b", state_value={"k": "B"}),
        Probe("det", questions_value={}, reducer=lambda answers, trace: DECIDED),
        Probe("pre", early=SKIPPED),
        Probe("c", state_value={"k": "C"}),
    ]


def _results(report: Report) -> dict[str, MetricResult]:
    return {entry.id: entry.result for entry in report.results}


@pytest.mark.asyncio
async def test_backstop_keeps_finished_results_requests_and_unknown_usage() -> None:
    """Never-returning judge: group 1 and planning results kept, the rest TIMEOUT, 2 requests."""
    # Usage: group 1's, plus one unknown entry for the request that got no reply.
    judge = StubbornJudge()
    evaluator = Evaluator(judge, _metrics(), Limits(budget_s=BUDGET_S))
    trace, progress = make_trace(), Progress()
    started = time.monotonic()
    task = asyncio.create_task(evaluator.evaluate(trace, progress=progress))
    with pytest.raises(TimeoutError):  # the caller's backstop: it stops waiting for the task
        async with asyncio.timeout(BACKSTOP_S):
            await asyncio.shield(task)
    task.cancel()
    elapsed_s = time.monotonic() - started
    report = evaluator.interrupted_report(trace, progress, elapsed_s)

    results = _results(report)
    assert results["a"].status is Status.DECIDED
    assert (results["b"], results["c"]) == (TIMEOUT, TIMEOUT)
    assert (results["det"], results["pre"]) == (DECIDED, SKIPPED)
    assert (report.requests, report.usage) == (2, (FIRST_USAGE, UNKNOWN))
    assert [e.asked for e in report.results] == [("q",), ("q",), (), (), ("q",)]
    assert (report.trace_id, report.elapsed_s) == (trace.id, elapsed_s)
    assert (progress.requests, progress.awaiting) == (2, 1)
    assert judge.cancels == 1  # the engine's own deadline cancelled it first, in vain

    judge.release.set()  # let the abandoned evaluation end: it must not start group C
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)
    assert judge.calls == 2


@pytest.mark.asyncio
async def test_reply_after_the_cancel_counts_usage_but_not_results() -> None:
    """A reply after the caller's cancel: usage counted, results TIMEOUT, no further group."""
    # The caller's plain timeout ends it (no shield and cancel, as in the backstop test above).
    judge = StubbornJudge(cancels_to_return=2)  # the engine's deadline, then the backstop
    evaluator = Evaluator(judge, _metrics(), Limits(budget_s=BUDGET_S))
    trace, progress = make_trace(), Progress()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(BACKSTOP_S):
            await evaluator.evaluate(trace, progress=progress)
    report = evaluator.interrupted_report(trace, progress, BACKSTOP_S)
    late = RequestUsage(model="test-judge", usage=Usage(input_tokens=7, output_tokens=1))
    assert (_results(report)["b"], _results(report)["c"]) == (TIMEOUT, TIMEOUT)
    assert _results(report)["a"].status is Status.DECIDED
    assert (report.requests, report.usage, judge.calls) == (2, (FIRST_USAGE, late), 2)


@pytest.mark.asyncio
async def test_outer_cancel_of_a_well_behaved_judge_keeps_the_request() -> None:
    """An outer cancel of an in-flight request (judge lets it through): 1 request, 1 unknown."""
    judge = BlockingJudge()
    evaluator = Evaluator(judge, _metrics(), Limits(budget_s=5.0))
    trace, progress = make_trace(), Progress()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await evaluator.evaluate(trace, progress=progress)
    report = evaluator.interrupted_report(trace, progress, 0.1)
    assert [e.result for e in report.results] == [TIMEOUT, TIMEOUT, DECIDED, SKIPPED, TIMEOUT]
    assert (report.requests, report.usage, judge.cancelled) == (1, (UNKNOWN,), 1)


@pytest.mark.asyncio
async def test_progress_of_a_finished_evaluation_matches_its_report() -> None:
    """After a normal finish nothing is awaiting: the interrupted report equals the real one."""
    evaluator = Evaluator(ScriptedJudge(), _metrics())
    trace, progress = make_trace(), Progress()
    report = await evaluator.evaluate(trace, progress=progress)
    again = evaluator.interrupted_report(trace, progress, report.elapsed_s)
    assert again == report
    assert (progress.requests, progress.awaiting) == (3, 0)


def test_unused_progress_gives_all_timeout_and_no_requests() -> None:
    """Cancelled before evaluate ran: every metric TIMEOUT, zero requests, no usage."""
    evaluator = Evaluator(ScriptedJudge(), _metrics())
    report = evaluator.interrupted_report(make_trace(), Progress(), 0.0)
    assert [e.result for e in report.results] == [TIMEOUT] * 5
    assert (report.requests, report.usage, report.elapsed_s) == (0, (), 0.0)


@pytest.mark.asyncio
async def test_incomplete_trace_results_are_kept() -> None:
    """Results decided while planning (INCOMPLETE_TRACE skips) count as completed."""
    evaluator = Evaluator(ScriptedJudge(), _metrics())
    trace, progress = make_trace(issues=("UNPAIRED_TOOL_CALL",)), Progress()
    await evaluator.evaluate(trace, progress=progress)
    report = evaluator.interrupted_report(trace, progress, 0.0)
    assert [e.result for e in report.results] == [MetricResult.skipped(Reason.INCOMPLETE_TRACE)] * 5


@pytest.mark.asyncio
async def test_a_progress_records_one_evaluation() -> None:
    """Reusing a Progress, or reading it for another trace or evaluator, is a ValueError."""
    evaluator = Evaluator(ScriptedJudge(), _metrics())
    trace, progress = make_trace(), Progress()
    await evaluator.evaluate(trace, progress=progress)
    with pytest.raises(ValueError, match="one evaluation"):
        await evaluator.evaluate(trace, progress=progress)
    with pytest.raises(ValueError, match="another"):
        evaluator.interrupted_report(make_trace("t2"), progress, 0.0)
    with pytest.raises(ValueError, match="another"):
        Evaluator(ScriptedJudge(), _metrics()).interrupted_report(trace, progress, 0.0)


@pytest.mark.parametrize("elapsed_s", [-0.1, math.nan, math.inf, True, "1"])
def test_interrupted_report_refuses_a_bad_elapsed(elapsed_s: object) -> None:
    """elapsed_s must be a finite number >= 0 (the report would otherwise carry nonsense)."""
    evaluator = Evaluator(ScriptedJudge(), _metrics())
    with pytest.raises(ValueError, match="elapsed_s"):
        evaluator.interrupted_report(make_trace(), Progress(), elapsed_s)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_progress_argument_must_be_a_progress() -> None:
    """A progress that is not a Progress is a ValueError, before anything runs."""
    judge = ScriptedJudge()
    evaluator = Evaluator(judge, _metrics())
    with pytest.raises(ValueError, match="Progress"):
        await evaluator.evaluate(make_trace(), progress=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Progress"):
        evaluator.interrupted_report(make_trace(), object(), 0.0)  # type: ignore[arg-type]
    assert judge.requests == []
