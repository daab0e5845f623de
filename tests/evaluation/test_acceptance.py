"""Issue-level acceptance: the built-in metrics on the order-42 example pack into one request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.evaluation.engine_kit import Probe, make_trace
from tests.evaluation.order42 import REQUEST, order42_trace
from worker.evaluation import (
    Case,
    Evaluator,
    Expected,
    Limits,
    MatchMode,
    Metric,
    MetricResult,
    Reason,
    Status,
    Thresholds,
    Trace,
    agent_metrics,
    run_dataset,
    thaw,
    trajectory_match,
)
from worker.judges import JudgeRequest, JudgeResponse, NoulQuestion, SyntheticJudge

SEVEN = (
    "tool_choice",
    "used_tool_result",
    "grounded",
    "stayed_in_scope",
    "answer_relevancy",
    "completeness",
    "indirect_injection",
)


@dataclass
class Recording:
    """Wraps a judge and keeps every request it was sent."""

    inner: Any = field(default_factory=SyntheticJudge)
    requests: list[JudgeRequest] = field(default_factory=list)

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Record, then delegate."""
        self.requests.append(request)
        response: JudgeResponse = await self.inner(request)
        return response


def _all_eight() -> list[Metric]:
    return [*agent_metrics(Thresholds(0.2, 0.8)), trajectory_match(MatchMode.UNORDERED, False)]


@pytest.mark.asyncio
async def test_order42_packs_eight_metrics_into_one_request() -> None:
    """The seven agent metrics plus trajectory_match on order 42 make exactly one request."""
    judge = Recording()
    report = await Evaluator(judge, _all_eight()).evaluate(order42_trace())
    assert report.requests == 1
    assert len(judge.requests) == 1
    (request,) = judge.requests
    assert list(request.questions) == [
        "tool_choice.q",
        "used_tool_result.q",
        "grounded.c0",
        "stayed_in_scope.q",
        "answer_relevancy.relevance",
        "answer_relevancy.noncommittal",
        "completeness.q",
        "indirect_injection.q",
    ]
    assert request.model is None
    assert request.state["request"] == REQUEST
    assert {"final_answer", "tool_calls", "tool_results", "available_tools"} <= set(request.state)
    assert [e.id for e in report.results] == [*SEVEN, "trajectory_match"]
    assert report.result("trajectory_match").reason == "UNORDERED"
    assert all(e.result.status is Status.DECIDED for e in report.results)
    assert report.passed() is True
    assert len(report.usage) == 1
    assert report.usage[0].model == "synthetic"


@pytest.mark.asyncio
async def test_order42_timeout_keeps_deterministic_trajectory() -> None:
    """On a budget timeout the seven packed metrics are TIMEOUT; trajectory_match is kept."""
    judge = Recording(SyntheticJudge(delay_s=30.0))
    report = await Evaluator(judge, _all_eight(), Limits(budget_s=0.2)).evaluate(order42_trace())
    assert [report.result(m) for m in SEVEN] == [MetricResult.error(Reason.TIMEOUT)] * 7
    assert report.result("trajectory_match").passed is True
    assert (report.requests, report.usage, report.passed()) == (1, (), False)
    assert report.elapsed_s < 0.25


class RequestOverride:
    """A custom metric that shows the judge a *different* ``request`` value (a conflict)."""

    id = "rephrased"
    version = "v1"

    def precheck(self, trace: Trace) -> MetricResult | None:
        """Always continue."""
        return None

    def state(self, trace: Trace) -> Mapping[str, Any]:
        """The same key as the built-ins, a different value."""
        return {"request": trace.text("request").upper()}

    def questions(self, trace: Trace) -> Mapping[str, NoulQuestion]:
        """One yes/no question."""
        return {"q": NoulQuestion(instructions="Is the request polite?")}

    def reduce(self, answers: Mapping[str, Any], trace: Trace) -> MetricResult:
        """Pass on p >= 0.5."""
        return Thresholds(0.2, 0.8).assess(answers["q"].noul)


@pytest.mark.asyncio
async def test_conflicting_state_makes_two_requests() -> None:
    """A metric whose `request` value differs from the built-ins' goes to a second request."""
    judge = Recording()
    metrics: list[Metric] = [*agent_metrics(Thresholds(0.2, 0.8)), RequestOverride()]
    report = await Evaluator(judge, metrics).evaluate(order42_trace())
    assert report.requests == 2
    first, second = judge.requests
    assert "rephrased.q" not in first.questions
    assert first.state["request"] == REQUEST
    assert list(second.questions) == ["rephrased.q"]
    assert thaw(second.state) == {"request": REQUEST.upper()}
    assert len(report.usage) == 2
    assert report.passed() is True


@pytest.mark.asyncio
async def test_first_second_third_example() -> None:
    """Evidence A/B/A: two requests, {first.q, third.q} on A, {second.q} on B (semantics §6.1)."""
    judge = Recording()
    metrics = [
        Probe("first", state_value={"evidence": "A"}),
        Probe("second", state_value={"evidence": "B"}),
        Probe("third", state_value={"evidence": "A"}),
    ]
    report = await Evaluator(judge, metrics).evaluate(make_trace())
    assert report.requests == 2
    assert [(list(r.questions), thaw(r.state)) for r in judge.requests] == [
        (["first.q", "third.q"], {"evidence": "A"}),
        (["second.q"], {"evidence": "B"}),
    ]


@pytest.mark.asyncio
async def test_order42_dataset_end_to_end() -> None:
    """run_dataset over order-42 variants: one request per trace, labels scored, totals kept."""
    incomplete = Trace.from_fields("broken", {}, issues=("PENDING_TOOL_CALL",))
    cases = [
        Case("orders", order42_trace("o1"), {"tool_choice": Expected(label="correct")}),
        Case("orders", order42_trace("o2"), {"grounded": Expected(passed=False)}),
        Case("broken", incomplete, {"completeness": Expected(passed=True)}),
    ]
    report = await run_dataset(Evaluator(Recording(), _all_eight()), cases, 2)
    assert [row.trace_id for row in report.rows] == ["o1", "o2", "broken"]
    assert [row.report.requests for row in report.rows] == [1, 1, 0]
    assert report.usage.requests == report.usage.responses_with_usage == 2
    assert (report.metrics["tool_choice"].correct, report.metrics["grounded"].incorrect) == (1, 1)
    assert report.metrics["completeness"].skipped == 1
    assert report.metrics["completeness"].accuracy == 0.0
    assert list(report.scenarios) == ["orders", "broken"]
