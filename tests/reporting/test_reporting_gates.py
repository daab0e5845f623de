"""`--fail-under` gates decided on a report's numbers: lower bound, coverage, reasons (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from worker.reporting import (
    BREACH_EXIT_CODE,
    GATE_EXIT_CODE,
    EvalReport,
    Gate,
    ReportScope,
    StoreTotals,
    check_gates,
    compute_report,
    weighted_wilson,
    wilson,
)
from worker.store import ResultRow

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _row(
    n: int, metric_id: str, status: str, passed: bool | None = None, weight: float = 1.0
) -> ResultRow:
    fields: dict[str, Any] = {
        "evaluation_id": f"e-{n}",
        "snapshot_id": f"s-{n}",
        "trace_id": f"t-{n}",
        "metric_set": "agent",
        "metric_set_version": "agent@1",
        "run": "",
        "judge_kind": "synthetic",
        "synthetic": True,
        "lane": "live",
        "created_at": NOW,
        "position": 0,
        "metric_id": metric_id,
        "metric_version": "1",
        "status": status,
        "reason": status if status != "SKIPPED" else "NO_EVIDENCE",
        "score": None,
        "passed": passed,
        "label": None,
        "evidence": {},
        "judge_model": None,
        "question_ids": (),
        "window_rule": "invocation_end",
        "cutoff_event_id": "a1",
        "cutoff_time": None,
        "agent_version": None,
        "environment": None,
        "tool": None,
        "sampling_weight": weight,
    }
    return ResultRow.model_validate(fields)


def _report(rows: list[ResultRow]) -> EvalReport:
    return compute_report(
        rows,
        [],
        [],
        [],
        scope=ReportScope(),
        totals=StoreTotals(store="memory", snapshots=len(rows), dead_letters_open=0),
        now=NOW,
    )


def _mixed() -> EvalReport:
    """grounded: 18 of 20 verdicts pass, all DECIDED; tool_choice: 3 DECIDED of 10."""
    rows = [_row(n, "grounded", "DECIDED", passed=n >= 2) for n in range(20)]
    rows += [_row(n, "tool_choice", "DECIDED", passed=True) for n in range(3)]
    rows += [_row(n, "tool_choice", "SKIPPED") for n in range(3, 10)]
    rows += [_row(n, "answer_relevancy", "SKIPPED") for n in range(4)]
    rows += [_row(n, "completeness", "DECIDED") for n in range(4)]  # no verdicts, only labels
    return _report(rows)


def test_gate_passes_at_the_lower_bound_and_fails_just_above_it() -> None:
    """The gate compares the Wilson lower bound (not the rate) with RATE."""
    report = _mixed()
    low = wilson(18, 20).low
    assert low is not None
    (at,) = check_gates(report, [Gate(metric_id="grounded", min_rate=low)])
    (above,) = check_gates(report, [Gate(metric_id="grounded", min_rate=min(1.0, low + 1e-9))])
    assert at.passed
    assert (at.lower, at.rate, at.coverage, at.verdicts) == (low, 0.9, 1.0, 20)
    assert (above.passed, above.reason) == (False, "UNDER_RATE")
    assert "FAIL (UNDER_RATE" in above.line()
    assert at.line().startswith(f"grounded >= {low:g}: lower {low:.3f}, rate 0.900 (n=20)")


def test_too_little_coverage_fails_whatever_the_rate() -> None:
    """3 DECIDED of 10 (coverage 0.3) fails at --min-coverage 0.5 even at RATE 0; passes at 0.3."""
    report = _mixed()
    (low_cov,) = check_gates(report, [Gate(metric_id="tool_choice", min_rate=0.0)])
    assert (low_cov.passed, low_cov.reason, low_cov.coverage) == (False, "LOW_COVERAGE", 0.3)
    assert "coverage under --min-coverage 0.5" in low_cov.line()
    (enough,) = check_gates(report, [Gate(metric_id="tool_choice", min_rate=0.0)], 0.3)
    assert enough.passed


def test_no_results_and_no_verdicts_fail_with_their_reasons() -> None:
    """A metric absent from the report, all SKIPPED, or DECIDED without verdicts never passes."""
    report = _mixed()
    gates = [
        Gate(metric_id="trajectory_match", min_rate=0.0),
        Gate(metric_id="answer_relevancy", min_rate=0.0),
        Gate(metric_id="completeness", min_rate=0.0),
    ]
    reasons = [r.reason for r in check_gates(report, gates)]
    assert reasons == ["NO_RESULTS", "LOW_COVERAGE", "NO_VERDICTS"]
    no_floor = [r.reason for r in check_gates(report, gates, 0.0)]
    assert no_floor == ["NO_RESULTS", "NO_VERDICTS", "NO_VERDICTS"]


def test_a_weighted_report_gates_on_the_weighted_interval() -> None:
    """With sampling weights, the lower bound is the weighted (Kish) one, and the line says so."""
    rows = [
        _row(n, "grounded", "DECIDED", passed=n % 4 != 0, weight=1.0 + n % 2) for n in range(12)
    ]
    report = _report(rows)
    (result,) = check_gates(report, [Gate(metric_id="grounded", min_rate=0.0)])
    expected = weighted_wilson((1.0 + n % 2, n % 4 != 0) for n in range(12))
    assert (result.weighted, result.lower, result.rate) == (True, expected.low, expected.value)
    assert "weighted rate" in result.line()


@pytest.mark.parametrize(
    "text",
    [
        "grounded",
        "grounded=",
        "=0.5",
        "grounded=1.01",
        "grounded=-0.1",
        "grounded=x",
        "grounded=nan",
    ],
)
def test_gate_text_is_metric_equals_rate_between_0_and_1(text: str) -> None:
    """Anything but METRIC=RATE with RATE in [0, 1] is a ValueError naming the form."""
    with pytest.raises(ValueError, match="METRIC=RATE"):
        Gate.parse(text)


def test_gate_text_parses_and_a_failed_gate_exits_like_a_breach() -> None:
    """``grounded=0.8`` is a gate; a failed gate exits 3, the code of a breached threshold."""
    assert Gate.parse(" grounded = 0.8") == Gate(metric_id="grounded", min_rate=0.8)
    assert GATE_EXIT_CODE == BREACH_EXIT_CODE == 3
