"""Pure pieces of the report and status: intervals, gold counts, calibration, scope, thresholds."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker.reporting import (
    PLOT_IDS,
    BrokerStatus,
    Decisions,
    LaneStatus,
    QueuesStatus,
    ReportScope,
    StatusReport,
    StatusThresholds,
    StoreTotals,
    Throughput,
    WorkersStatus,
    backfill_statuses,
    compute_report,
    decisions_from_counts,
    nearest_rank,
    parse_when,
    probability_source,
    redact_url,
    render_html,
    weighted_wilson,
    wilson,
)
from worker.store import (
    Checkpoint,
    EvaluationRow,
    LinkedOutcome,
    ResultCount,
    ResultRow,
    SnapshotLabels,
    UsageRecord,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _row(metric_id: str, status: str, **fields: Any) -> ResultRow:
    base: dict[str, Any] = {
        "evaluation_id": "e-1",
        "snapshot_id": "s-1",
        "trace_id": "t-1",
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
        "reason": status,
        "score": None,
        "passed": None,
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
        "sampling_weight": 1.0,
    }
    return ResultRow.model_validate({**base, **fields})


def _evaluation(evaluation_id: str, elapsed_s: float, **fields: Any) -> EvaluationRow:
    base: dict[str, Any] = {
        "evaluation_id": evaluation_id,
        "snapshot_id": f"s-{evaluation_id}",
        "trace_id": f"t-{evaluation_id}",
        "metric_set_version": "agent@1",
        "judge_kind": "chat",
        "judge_model": "m",
        "synthetic": False,
        "requests": 1,
        "usage": (UsageRecord(model="m", usage={"input_tokens": 10, "output_tokens": 2}),),
        "elapsed_s": elapsed_s,
        "lane": "live",
        "created_at": NOW,
        "agent_version": None,
        "environment": None,
        "tool": None,
        "sampling_rate": 1.0,
        "sampling_weight": 1.0,
        "sampling_rule": "all",
    }
    return EvaluationRow.model_validate({**base, **fields})


def _report(
    results: list[ResultRow],
    evaluations: list[EvaluationRow] | None = None,
    labels: list[SnapshotLabels] | None = None,
    outcomes: list[LinkedOutcome] | None = None,
    scope: ReportScope | None = None,
) -> Any:
    return compute_report(
        results,
        evaluations or [],
        labels or [],
        outcomes or [],
        scope=scope or ReportScope(),
        totals=StoreTotals(store="mem", snapshots=0, dead_letters_open=0),
        now=NOW,
    )


# --- intervals -----------------------------------------------------------------------------------


def test_wilson_matches_the_textbook_interval() -> None:
    """Wilson 95 % for 5/10 is [0.2366, 0.7634]; 0/0 has no value; bounds stay in [0, 1]."""
    rate = wilson(5, 10)
    assert rate.low == pytest.approx(0.2366, abs=1e-4)
    assert rate.high == pytest.approx(0.7634, abs=1e-4)
    assert wilson(0, 0).value is None
    full = wilson(7, 7)
    assert full.high == 1.0
    assert 0.5 < (full.low or 0.0) < 1.0


def test_weighted_wilson_equals_wilson_for_equal_weights_and_uses_kish_n() -> None:
    """Equal weights reproduce Wilson; unequal weights shrink n to (Σw)²/Σw²."""
    plain = wilson(3, 8)
    weighted = weighted_wilson([(2.0, True)] * 3 + [(2.0, False)] * 5)
    assert (weighted.value, weighted.low, weighted.high) == pytest.approx(
        (plain.value, plain.low, plain.high)
    )
    uneven = weighted_wilson([(4.0, True), (1.0, False), (1.0, False)])
    assert uneven.value == pytest.approx(4 / 6)
    assert uneven.effective_n == pytest.approx(36 / 18)
    assert weighted_wilson([]).value is None


def test_nearest_rank_follows_the_spec_formula() -> None:
    """P(p) = sorted[ceil(p·n) - 1], 0 for no values (docs/semantics.md §8)."""
    values = [float(v) for v in range(1, 21)]
    assert nearest_rank(values, 50) == values[math.ceil(0.5 * 20) - 1]
    assert nearest_rank(values, 95) == 19.0
    assert nearest_rank([7.0], 95) == 7.0
    assert nearest_rank([], 50) == 0.0


# --- per-metric rates and gold summaries ------------------------------------------------------


def test_rates_keep_decided_without_verdict_out_of_the_pass_rate() -> None:
    """Pass rate is over DECIDED with a verdict; coverage is DECIDED / all; missing evidence."""
    rows = [
        _row("m", "DECIDED", passed=True),
        _row("m", "DECIDED", passed=False),
        _row("m", "DECIDED", passed=None, label="x"),
        _row("m", "SKIPPED", reason="NO_EVIDENCE"),
        _row("m", "SKIPPED", reason="INCOMPLETE_TRACE"),
        _row("m", "ERROR", reason="TIMEOUT"),
    ]
    m = _report(rows).metrics["m"]
    assert (m.pass_rate.numerator, m.pass_rate.denominator) == (1, 2)
    assert (m.coverage.numerator, m.coverage.denominator) == (3, 6)
    assert (m.missing_evidence.numerator, m.decided_without_verdict) == (1, 1)
    assert m.by_reason == {"DECIDED": 3, "NO_EVIDENCE": 1, "INCOMPLETE_TRACE": 1, "TIMEOUT": 1}
    assert m.weighted is None


def _labelled(
    snapshot_id: str, labels: dict[str, Any], source: str | None = None
) -> SnapshotLabels:
    return SnapshotLabels(snapshot_id=snapshot_id, labels=labels, source=source)


def test_gold_summary_counts_like_section_f_with_the_full_denominator() -> None:
    """correct/incorrect/unscored only for labelled DECIDED; abstain/skip/error count anyway."""
    rows = [
        _row("v", "DECIDED", snapshot_id="a", passed=True, tool="x"),
        _row("v", "DECIDED", snapshot_id="b", passed=False, tool="x"),
        _row("v", "DECIDED", snapshot_id="c", passed=None, tool="y"),
        _row("v", "INCONCLUSIVE", snapshot_id="d", tool="y"),
        _row("v", "ERROR", snapshot_id="e", reason="BACKEND_ERROR", tool="y"),
        _row("v", "DECIDED", snapshot_id="f", passed=True, tool="y"),  # labelled set, no label
        _row("v", "DECIDED", snapshot_id="z", passed=True),  # not in the labelled set at all
    ]
    gold = {"v": {"passed": True}}
    labels = [_labelled(s, gold) for s in "abcde"] + [_labelled("f", {"other": {"passed": True}})]
    summary = _report(rows, labels=labels).gold.metrics["v"]
    assert (summary.total, summary.labelled) == (6, 5)
    assert (summary.correct, summary.incorrect, summary.unscored) == (1, 1, 1)
    assert (summary.inconclusive, summary.errors, summary.skipped) == (1, 1, 0)
    assert summary.accuracy == pytest.approx(1 / 5)
    scenarios = _report(rows, labels=labels).gold.scenarios
    assert list(scenarios) == ["x", "y"]  # first-seen order
    assert scenarios["x"]["v"].correct == 1


def test_confusion_rows_sum_to_the_labelled_count_and_scenario_can_be_the_source() -> None:
    """Expected label x actual label (status name when not DECIDED); scenario_by=source."""
    rows = [
        _row("tool_choice", "DECIDED", snapshot_id="a", label="correct", passed=True),
        _row("tool_choice", "DECIDED", snapshot_id="b", label="correct", passed=True),
        _row("tool_choice", "INCONCLUSIVE", snapshot_id="c", label="missing"),
    ]
    labels = [
        _labelled("a", {"tool_choice": {"label": "correct"}}, "openai_chat"),
        _labelled("b", {"tool_choice": {"label": "wrong_tool"}}, "otlp"),
        _labelled("c", {"tool_choice": {"label": "missing"}}, "otlp"),
    ]
    gold = _report(rows, labels=labels, scope=ReportScope(scenario_by="source")).gold
    confusion = gold.confusion["tool_choice"]
    assert confusion.counts == {
        "correct": {"INCONCLUSIVE": 0, "correct": 1},
        "missing": {"INCONCLUSIVE": 1, "correct": 0},
        "wrong_tool": {"INCONCLUSIVE": 0, "correct": 1},
    }
    assert sum(sum(r.values()) for r in confusion.counts.values()) == 3
    assert set(gold.scenarios) == {"openai_chat", "otlp"}


def test_calibration_bins_pass_probabilities_and_reports_ece() -> None:
    """Verdict gold vs the score when evidence says it is a probability; rubric scores excluded."""
    probability = {"yes_probability": 0.0}
    rows = [
        _row("p", "DECIDED", snapshot_id="a", score=0.95, passed=True, evidence=probability),
        _row("p", "DECIDED", snapshot_id="b", score=0.9, passed=True, evidence=probability),
        _row("p", "INCONCLUSIVE", snapshot_id="c", score=0.15, evidence=probability),
        _row("r", "DECIDED", snapshot_id="a", score=0.9, passed=True, evidence={"rubric_score": 3}),
    ]
    labels = [
        _labelled("a", {"p": {"passed": True}, "r": {"passed": True}}),
        _labelled("b", {"p": {"passed": False}}),
        _labelled("c", {"p": {"passed": False}}),
    ]
    (table,) = _report(rows, labels=labels).gold.calibration
    assert (table.metric_id, table.kind, table.n) == ("p", "pass_probability", 3)
    occupied = [(round(b.low, 1), b.n, b.mean_predicted, b.observed) for b in table.bins if b.n]
    assert occupied == [
        (0.1, 1, pytest.approx(0.15), 0.0),
        (0.9, 2, pytest.approx(0.925), 0.5),
    ]
    assert table.ece == pytest.approx(1 / 3 * 0.15 + 2 / 3 * 0.425)
    assert table.probability_source == "synthetic"


def test_probability_sources_name_where_probabilities_come_from() -> None:
    """synthetic, self-reported (chat/text models) and backend-reported (System One)."""
    assert [probability_source(k) for k in ("synthetic", "chat", "systemone", "x")] == [
        "synthetic",
        "self-reported",
        "backend-reported",
        "unknown",
    ]


def test_latency_usage_and_judges_from_evaluation_rows() -> None:
    """Nearest-rank latency, incomplete usage when a response had none, judges listed."""
    evaluations = [_evaluation(str(i), elapsed_s=i / 10) for i in range(1, 11)]
    evaluations.append(
        _evaluation("x", 2.0, requests=2, usage=(UsageRecord(model="m", usage=None),))
    )
    report = _report([], evaluations=evaluations)
    assert report.latency.p50_ms == pytest.approx(600.0)
    assert report.latency.p95_ms == pytest.approx(2000.0)
    assert (report.usage.requests, report.usage.responses_with_usage) == (12, 10)
    assert report.usage.incomplete is True
    assert report.synthetic is False
    assert [(j.kind, j.probability_source) for j in report.judges] == [("chat", "self-reported")]


def test_outcome_view_counts_judgment_by_outcome_without_touching_records() -> None:
    """Each linked result adds (metric, judgment, outcome, value); plus the evaluation verdict."""
    rows = [
        _row("a", "DECIDED", evaluation_id="e1", passed=True),
        _row("b", "DECIDED", evaluation_id="e1", passed=False),
        _row("a", "DECIDED", evaluation_id="e2", passed=True),
    ]
    link = LinkedOutcome(
        evaluation_id="e1", event_id="o1", name="refund_reversed", value={"x": 1}, observed_at=NOW
    )
    view = _report(rows, outcomes=[link]).outcomes
    assert [(r.metric_id, r.judgment, r.outcome, r.value, r.n) for r in view.rows] == [
        ("(evaluation)", "not passed", "refund_reversed", '{"x":1}', 1),
        ("a", "passed", "refund_reversed", '{"x":1}', 1),
        ("b", "failed", "refund_reversed", '{"x":1}', 1),
    ]


def test_coverage_series_buckets_by_time_per_slice() -> None:
    """Coverage per slice value per time bucket; the bucket grows with the span."""
    later = NOW + timedelta(hours=3)
    evaluations = [_evaluation("1", 0.1), _evaluation("2", 0.1, created_at=later)]
    rows = [
        _row("m", "DECIDED", passed=True, agent_version="v1"),
        _row("m", "SKIPPED", reason="NO_CLAIMS", agent_version="v1"),
        _row("m", "DECIDED", passed=True, agent_version="v2", created_at=later),
    ]
    coverage = _report(rows, evaluations=evaluations).coverage
    assert coverage.bucket_s == 300
    series = {s.value: [(p.results, p.decided) for p in s.points] for s in coverage.series}
    assert series == {"v1": [(2, 1)], "v2": [(1, 1)]}


def test_parse_when_accepts_iso_and_relative_times() -> None:
    """ISO date/time (naive means UTC) or a duration ago; anything else is a ValueError."""
    assert parse_when("30m", NOW) == NOW - timedelta(minutes=30)
    assert parse_when("2d", NOW) == NOW - timedelta(days=2)
    assert parse_when("2025-01-02", NOW) == datetime(2025, 1, 2, tzinfo=UTC)
    assert parse_when("2025-01-02T03:04:05Z", NOW) == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    with pytest.raises(ValueError, match="Invalid isoformat"):
        parse_when("soon", NOW)


def test_html_escapes_values_and_always_holds_the_five_plots() -> None:
    """Free-text slice values are escaped; an empty report still has every plot (empty state)."""
    rows = [_row("m", "DECIDED", passed=True, agent_version="<script>alert(1)</script>")]
    page = render_html(_report(rows, evaluations=[_evaluation("1", 0.2)]))
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    empty = render_html(_report([]))
    for plot_id in PLOT_IDS:
        assert f'id="{plot_id}"' in empty
    assert "SYNTHETIC" not in empty


# --- status --------------------------------------------------------------------------------------


def test_backfill_states_from_checkpoints() -> None:
    """complete when every started file has complete:, running while fresh, stalled after."""

    def cp(backfill_id: str, source: str, age_s: float, position: int = 4) -> Checkpoint:
        return Checkpoint(
            backfill_id=backfill_id,
            source=source,
            position=position,
            enqueued=position,
            recorded_at=NOW - timedelta(seconds=age_s),
        )

    checkpoints = [
        cp("done", "/a", 10),
        cp("done", "complete:/a", 10),
        cp("fresh", "/a", 10, 7),
        cp("fresh", "/b", 20, 3),
        cp("old", "/a", 900),
    ]
    states = backfill_statuses(checkpoints, {"fresh": (5, 1)}, now=NOW, stale_after_s=300)
    by_id = {s.backfill_id: s for s in states}
    assert {k: v.state for k, v in by_id.items()} == {
        "done": "complete",
        "fresh": "running",
        "old": "stalled",
    }
    fresh = by_id["fresh"]
    assert (fresh.files_started, fresh.read, fresh.evaluated, fresh.failed) == (2, 10, 5, 1)


def test_decisions_map_reasons_and_say_unknown_for_unrecorded_ones() -> None:
    """Reasons map to decisions; sampled_out is unknown without tallies, known with them."""
    counts = [
        ResultCount("m", "DECIDED", "DECIDED", 5),
        ResultCount("m", "SKIPPED", "NO_TOOL_RESULTS", 2),
        ResultCount("n", "SKIPPED", "MISSING_FIELDS", 1),
        ResultCount("m", "SKIPPED", "EVALUATION_LIMIT", 1),
        ResultCount("m", "ERROR", "TIMEOUT", 3),
        ResultCount("m", "ERROR", "INVALID_RESPONSE", 4),
    ]
    found = decisions_from_counts(counts, 60, sampled_out=None, sampled_out_estimate=2.5)
    by_code = {d.code: d for d in found.decisions}
    assert {c: d.n for c, d in by_code.items()} == {
        "scored": 5,
        "sampled_out": None,
        "not_ready": None,
        "inconclusive": 0,
        "incomplete_trace": 0,
        "missing_evidence": 3,
        "evaluation_limit": 1,
        "timeout": 3,
        "error": 4,
    }
    assert (by_code["sampled_out"].known, found.results) == (False, 16)
    known = decisions_from_counts(counts, 60, sampled_out=7, sampled_out_estimate=0)
    assert next(d for d in known.decisions if d.code == "sampled_out").n == 7


def _status(broker: BrokerStatus, dead: int = 0, recent: int = 0) -> StatusReport:
    return StatusReport(
        generated_at=NOW,
        store="mem",
        broker=broker,
        throughput=Throughput(last_1m=recent, last_5m=recent, per_min_5m=recent / 5),
        dead_letters={"X": dead} if dead else {},
        dead_letters_open=dead,
        backfills=(),
        backfills_complete=0,
        decisions=Decisions(window_s=60, results=0, decisions=(), sampled_out_estimate=0),
    )


def test_thresholds_list_breaches_and_unknown_inputs_breach() -> None:
    """Depth, age, dead letters, workers and recent throughput; no broker breaches its checks."""
    lanes = (
        LaneStatus(lane="live", queue="q", depth=12, unacked=0, oldest_age_s=40.0),
        LaneStatus(lane="backfill", queue="b", depth=3, unacked=0, oldest_age_s=None),
    )
    broker = BrokerStatus(
        configured=True,
        url="redis://h",
        error=None,
        queues=QueuesStatus(lanes=lanes, unacked_total=0, oldest_unacked_age_s=None),
        workers=WorkersStatus(online=1, names=("w",), active_tasks=0),
    )
    limits = StatusThresholds(
        max_depth=10, max_oldest_age_s=30, max_dead_letters=0, min_workers=2, min_recent_5m=1
    )
    assert limits.breaches(_status(broker, dead=1)) == (
        "depth[live] 12 > 10",
        "oldest age[live] 40.0 s > 30 s",
        "workers online 1 < 2",
        "dead letters 1 > 0",
        "evaluations in the last 5 min 0 < 1",
    )
    assert StatusThresholds(max_depth=12, min_workers=1).breaches(_status(broker)) == ()
    none = BrokerStatus(
        configured=False, url=None, error="BROKER_NOT_CONFIGURED", queues=None, workers=None
    )
    assert StatusThresholds(max_depth=1, min_workers=1).breaches(_status(none)) == (
        "queues unknown (BROKER_NOT_CONFIGURED)",
        "workers unknown (BROKER_NOT_CONFIGURED)",
    )
    assert StatusThresholds().breaches(_status(none, dead=5)) == ()


def test_redact_url_hides_only_the_password() -> None:
    """Broker URLs print without their password."""
    assert redact_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("amqp://user:pw@rabbit/vhost") == "amqp://user:***@rabbit/vhost"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
