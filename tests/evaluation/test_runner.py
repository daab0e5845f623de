"""Dataset runner: validation, ordering, concurrency, summaries, latency, usage (semantics §8)."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from tests.evaluation.engine_kit import Probe, ScriptedJudge, answer_all, make_trace
from worker.evaluation import (
    Case,
    DatasetReport,
    Evaluator,
    Expected,
    MetricResult,
    Status,
    Summary,
    Trace,
    run_dataset,
)
from worker.evaluation._runner import _nearest_rank
from worker.judges import InvalidReply, JudgeError, JudgeRequest, JudgeResponse, Usage


def _outcome_metric(metric_id: str) -> Probe:
    """A deterministic metric whose result is read from the trace field named after it."""

    def early(trace: Trace) -> MetricResult:
        return MetricResult.model_validate(dict(trace.fields[metric_id]))

    class FromTrace(Probe):
        def precheck(self, trace: Trace) -> Any:
            return early(trace)

    return FromTrace(metric_id)


def _result(status: str, passed: bool | None = None, label: str | None = None) -> dict[str, Any]:
    return {"status": status, "passed": passed, "label": label, "reason": status}


def _zero_summary() -> Summary:
    return Summary(
        total=0,
        labelled=0,
        correct=0,
        incorrect=0,
        inconclusive=0,
        skipped=0,
        errors=0,
        unscored=0,
        accuracy=0.0,
    )


# -- types and validation ----------------------------------------------------------------


def test_expected_needs_exactly_one() -> None:
    """Expected takes exactly one of passed or label."""
    assert Expected(passed=False).passed is False
    assert Expected(label="correct").label == "correct"
    with pytest.raises(ValueError, match="exactly one"):
        Expected()
    with pytest.raises(ValueError, match="exactly one"):
        Expected(passed=True, label="correct")
    with pytest.raises(ValueError):  # noqa: PT011 - a bool is required, not a truthy int
        Expected(passed=1)  # type: ignore[arg-type]


def test_case_validation() -> None:
    """A case needs a non-blank scenario and a Trace; its expected map is read-only."""
    trace = make_trace()
    case = Case("refunds", trace, {"m": Expected(passed=True)})
    assert (case.scenario, case.trace, dict(case.expected)) == (
        "refunds",
        trace,
        {"m": Expected(passed=True)},
    )
    assert Case("s", trace).expected == {}
    with pytest.raises(TypeError):
        case.expected["x"] = Expected(passed=True)  # type: ignore[index]
    with pytest.raises(ValueError, match="scenario"):
        Case("  ", trace)
    with pytest.raises(ValueError, match="Trace"):
        Case("s", {"id": "t1"})  # type: ignore[arg-type]


def test_run_dataset_is_a_coroutine_function() -> None:
    """run_dataset is awaited like evaluate."""
    assert inspect.iscoroutinefunction(run_dataset)


@pytest.mark.asyncio
@pytest.mark.parametrize("concurrency", [0, 33, -1, True, 1.5])
async def test_rejects_bad_concurrency(concurrency: Any) -> None:
    """Concurrency must be an integer in 1..32; nothing is evaluated otherwise."""
    judge = ScriptedJudge()
    with pytest.raises(ValueError, match="concurrency"):
        await run_dataset(Evaluator(judge, [Probe("m")]), [Case("s", make_trace())], concurrency)
    assert judge.requests == []


@pytest.mark.asyncio
@pytest.mark.parametrize("concurrency", [1, 32])
async def test_accepts_concurrency_bounds(concurrency: int) -> None:
    """Concurrency 1 and 32 are both valid."""
    report = await run_dataset(
        Evaluator(ScriptedJudge(), [Probe("m")]), [Case("s", make_trace())], concurrency
    )
    assert len(report.rows) == 1


@pytest.mark.asyncio
async def test_rejects_more_than_10000_cases() -> None:
    """At most 10 000 cases per dataset, checked before anything runs."""
    judge = ScriptedJudge()
    cases = [Case("s", make_trace(f"t{i}")) for i in range(10_001)]
    with pytest.raises(ValueError, match="10000"):
        await run_dataset(Evaluator(judge, [Probe("m")]), cases, 4)
    assert judge.requests == []


@pytest.mark.asyncio
async def test_rejects_duplicate_trace_ids() -> None:
    """Trace ids must be unique across the cases; nothing is evaluated otherwise."""
    judge = ScriptedJudge()
    cases = [Case("a", make_trace("t1")), Case("b", make_trace("t2")), Case("c", make_trace("t1"))]
    with pytest.raises(ValueError, match="unique"):
        await run_dataset(Evaluator(judge, [Probe("m")]), cases, 2)
    assert judge.requests == []


@pytest.mark.asyncio
async def test_rejects_expected_for_unknown_metric() -> None:
    """Every expected key must be one of the evaluator's metric ids."""
    judge = ScriptedJudge()
    cases = [Case("s", make_trace(), {"other": Expected(passed=True)})]
    with pytest.raises(ValueError, match="metric ids"):
        await run_dataset(Evaluator(judge, [Probe("m")]), cases, 1)
    assert judge.requests == []


@pytest.mark.asyncio
async def test_rejects_non_case_items() -> None:
    """Items must be Case instances."""
    with pytest.raises(ValueError, match="Case"):
        await run_dataset(Evaluator(ScriptedJudge(), [Probe("m")]), [make_trace()], 1)  # type: ignore[list-item]


# -- execution ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_rows_in_input_order_whatever_finishes_first() -> None:
    """Rows follow input order even when later traces finish first."""
    last_done = asyncio.Event()
    finished: list[str] = []

    async def judge(request: JudgeRequest) -> JudgeResponse:
        trace_id = request.state["trace"]
        if trace_id == "t0":
            await last_done.wait()  # the first case finishes last
        finished.append(trace_id)
        if trace_id == "t3":
            last_done.set()
        return answer_all(request)

    class TraceState(Probe):
        def state(self, trace: Trace) -> Any:
            return {"trace": trace.id}

    cases = [Case(f"s{i % 2}", make_trace(f"t{i}")) for i in range(4)]
    report = await run_dataset(Evaluator(judge, [TraceState("m")]), cases, 4)
    assert finished[-1] == "t0"
    assert [row.trace_id for row in report.rows] == ["t0", "t1", "t2", "t3"]
    assert [row.scenario for row in report.rows] == ["s0", "s1", "s0", "s1"]
    assert [row.report.trace_id for row in report.rows] == ["t0", "t1", "t2", "t3"]


@pytest.mark.asyncio
async def test_concurrency_is_used_and_bounded() -> None:
    """Exactly `concurrency` evaluations run at once when there is enough work."""
    in_flight, peak = 0, 0

    async def judge(request: JudgeRequest) -> JudgeResponse:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return answer_all(request)

    cases = [Case("s", make_trace(f"t{i}")) for i in range(7)]
    report = await run_dataset(Evaluator(judge, [Probe("m")]), cases, 3)
    assert peak == 3
    assert len(report.rows) == 7


@pytest.mark.asyncio
async def test_empty_dataset() -> None:
    """No cases: no rows, zero summaries per metric, zero latency and usage."""
    report = await run_dataset(Evaluator(ScriptedJudge(), [Probe("a"), Probe("b")]), [], 1)
    assert report.rows == ()
    assert dict(report.metrics) == {"a": _zero_summary(), "b": _zero_summary()}
    assert dict(report.scenarios) == {}
    assert (report.latency.p50_ms, report.latency.p95_ms) == (0.0, 0.0)
    assert report.usage.model_dump() == {
        "requests": 0,
        "responses_with_usage": 0,
        "input_tokens": 0,
        "output_tokens": 0,
    }


# -- summaries ---------------------------------------------------------------------------


def _labelled_dataset() -> list[Case]:
    """Ten cases covering every counting rule for metric `m` (and a label metric `tc`)."""
    d, i, s, e = "DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR"

    def p(value: bool) -> Expected:
        return Expected(passed=value)

    def lab(value: str) -> Expected:
        return Expected(label=value)

    rows: list[tuple[dict[str, Any], Expected | None, dict[str, Any], Expected | None]] = [
        # m result,            m expected, tc result,                       tc expected
        (_result(d, True),     p(True),    _result(d, True, "correct"),     lab("correct")),
        (_result(d, False),    p(True),    _result(d, False, "missing"),    lab("correct")),
        (_result(d, None),     p(False),   _result(d, None),                lab("missing")),
        (_result(d, False),    p(False),   _result(i, None, "missing"),     lab("missing")),
        (_result(i),           p(True),    _result(s),                      lab("x")),
        (_result(i),           None,       _result(e),                      None),
        (_result(s),           p(True),    _result(d, True, "correct"),     p(True)),
        (_result(s),           None,       _result(d, False, "correct"),    lab("correct")),
        (_result(e),           p(False),   _result(d, True, "unnecessary"), None),
        (_result(d, True),     None,       _result(e),                      p(True)),
    ]  # fmt: skip
    cases = []
    for n, (m, m_exp, tc, tc_exp) in enumerate(rows):
        expected = {k: v for k, v in (("m", m_exp), ("tc", tc_exp)) if v is not None}
        trace = make_trace(f"t{n}", m=m, tc=tc)
        cases.append(Case("even" if n % 2 == 0 else "odd", trace, expected))
    return cases


@pytest.mark.asyncio
async def test_summary_counting_rules() -> None:
    """Semantics §8 counts: status buckets for all rows, correctness for labelled DECIDED."""
    evaluator = Evaluator(ScriptedJudge(), [_outcome_metric("m"), _outcome_metric("tc")])
    report = await run_dataset(evaluator, _labelled_dataset(), 3)
    assert list(report.metrics) == ["m", "tc"]
    assert report.metrics["m"] == Summary(
        total=10,
        labelled=7,
        correct=2,  # rows 0, 3
        incorrect=1,  # row 1
        inconclusive=2,  # rows 4, 5
        skipped=2,  # rows 6, 7
        errors=1,  # row 8
        unscored=1,  # row 2 (passed None)
        accuracy=2 / 7,
    )
    assert report.metrics["tc"] == Summary(
        total=10,
        labelled=8,
        correct=3,  # rows 0, 6 (passed expected), 7 (label expected, passed ignored)
        incorrect=1,  # row 1
        inconclusive=1,  # row 3 (label kept, still abstained)
        skipped=1,  # row 4
        errors=2,  # rows 5, 9
        unscored=1,  # row 2 (label None)
        accuracy=3 / 8,
    )


@pytest.mark.asyncio
async def test_per_scenario_summaries_in_first_seen_order() -> None:
    """Scenarios keep first-seen order and are summarized over their own rows only."""
    cases = _labelled_dataset()
    cases = [cases[1], cases[0], *cases[2:]]  # "odd" is now seen first
    evaluator = Evaluator(ScriptedJudge(), [_outcome_metric("m"), _outcome_metric("tc")])
    report = await run_dataset(evaluator, cases, 2)
    assert list(report.scenarios) == ["odd", "even"]
    assert list(report.scenarios["even"]) == ["m", "tc"]
    even, odd = report.scenarios["even"]["m"], report.scenarios["odd"]["m"]
    # even rows 0, 2, 4, 6, 8; odd rows 1, 3, 5, 7, 9
    assert (even.total, even.labelled, even.correct, even.unscored, even.errors) == (5, 5, 1, 1, 1)
    assert (odd.total, odd.labelled, odd.correct, odd.incorrect, odd.skipped) == (5, 2, 1, 1, 1)
    assert even.accuracy == pytest.approx(1 / 5)
    assert odd.accuracy == pytest.approx(1 / 2)
    for field in Summary.model_fields:
        if field != "accuracy":
            total = getattr(even, field) + getattr(odd, field)
            assert total == getattr(report.metrics["m"], field)


@pytest.mark.asyncio
async def test_accuracy_zero_without_labels() -> None:
    """With no labelled rows, accuracy is 0 (read as "no accuracy")."""
    cases = [Case("s", make_trace("t1", m=_result("DECIDED", True)))]
    report = await run_dataset(Evaluator(ScriptedJudge(), [_outcome_metric("m")]), cases, 1)
    summary = report.metrics["m"]
    assert (summary.total, summary.labelled, summary.correct, summary.accuracy) == (1, 0, 0, 0.0)


# -- latency, usage, elapsed -------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "p50", "p95"),
    [
        ([], 0.0, 0.0),
        ([7.0], 7.0, 7.0),
        ([10.0, 20.0], 10.0, 20.0),
        ([10.0, 20.0, 30.0, 40.0], 20.0, 40.0),
        ([float(i) for i in range(1, 21)], 10.0, 19.0),
        ([float(i) for i in range(1, 101)], 50.0, 95.0),
        ([float(i) for i in range(1, 61)], 30.0, 57.0),
    ],
)
def test_nearest_rank(values: list[float], p50: float, p95: float) -> None:
    """P(p) = sorted[ceil(p*n) - 1], exact at the boundaries, and 0 for no values."""
    assert (_nearest_rank(values, 50), _nearest_rank(values, 95)) == (p50, p95)


@pytest.mark.asyncio
async def test_latency_uses_report_elapsed_nearest_rank() -> None:
    """Latency percentiles are nearest-rank over the rows' elapsed times in ms."""
    cases = [Case("s", make_trace(f"t{i}")) for i in range(9)]
    report = await run_dataset(Evaluator(ScriptedJudge(), [Probe("m")]), cases, 3)
    elapsed_ms = sorted(row.report.elapsed_s * 1000 for row in report.rows)
    assert report.latency.p50_ms == elapsed_ms[math.ceil(0.5 * 9) - 1]
    assert report.latency.p95_ms == elapsed_ms[math.ceil(0.95 * 9) - 1]
    assert report.elapsed_s * 1000 >= elapsed_ms[-1]


@pytest.mark.asyncio
async def test_usage_totals_count_only_known_usage() -> None:
    """Usage sums requests, and tokens only of entries with non-null, non-negative usage."""
    replies: Mapping[str, Any] = {
        "t0": lambda r: answer_all(r, usage=Usage(input_tokens=100, output_tokens=7)),
        "t1": lambda r: InvalidReply("llm:x", Usage(input_tokens=30, output_tokens=1)),
        "t2": lambda r: InvalidReply("llm:x", None),
        "t3": lambda r: JudgeError("HTTP 500", status=500),
        "t4": lambda r: InvalidReply("llm:x", Usage(input_tokens=-1, output_tokens=50)),
        "t5": lambda r: JudgeResponse(model="jev", answers=answer_all(r).answers, usage=None),
    }

    async def judge(request: JudgeRequest) -> JudgeResponse:
        outcome = replies[request.state["trace"]](request)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    class TraceState(Probe):
        def state(self, trace: Trace) -> Any:
            return {"trace": trace.id}

    cases = [Case("s", make_trace(t)) for t in replies]
    report = await run_dataset(Evaluator(judge, [TraceState("m")]), cases, 2)
    assert [len(row.report.usage) for row in report.rows] == [1, 1, 1, 0, 1, 1]
    assert report.usage.model_dump() == {
        "requests": 6,
        "responses_with_usage": 2,
        "input_tokens": 130,
        "output_tokens": 8,
    }


@pytest.mark.asyncio
async def test_dataset_report_is_frozen_json() -> None:
    """The dataset report is immutable and dumps to plain JSON (rows, summaries, totals)."""
    cases = [Case("s", make_trace("t1", m=_result("DECIDED", True)), {"m": Expected(passed=True)})]
    report = await run_dataset(Evaluator(ScriptedJudge(), [_outcome_metric("m")]), cases, 1)
    data = json.loads(json.dumps(report.model_dump(mode="json")))
    assert set(data) == {"rows", "metrics", "scenarios", "latency", "usage", "elapsed_s"}
    assert data["rows"][0]["expected"] == {"m": {"passed": True, "label": None}}
    assert data["scenarios"]["s"]["m"]["correct"] == 1
    assert isinstance(report, DatasetReport)
    with pytest.raises(ValidationError):
        report.elapsed_s = 0.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        report.metrics["m"] = _zero_summary()  # type: ignore[index]
    assert report.rows[0].report.result("m").status is Status.DECIDED
