"""What each page shows, read from the store in a bounded number of queries (no template here).

The overview's numbers are the report's (:class:`worker.reporting.MetricReport`: counts, pass
rate, scorable coverage and missing-evidence rate with Wilson intervals), computed from grouped
counts inside the database instead of a pass over every record, so it is unweighted: the
sampling-weighted estimates stay with ``evalq report``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from worker.canonical_json import thaw
from worker.reporting import MISSING_EVIDENCE_REASONS, MetricReport, wilson
from worker.store import (
    EvaluationLink,
    OutcomeLink,
    RecordScope,
    ResultFilter,
    ResultListRow,
    SnapshotIndex,
    Store,
    StoredEvaluation,
    StoreError,
    VerdictCount,
)

__all__ = [
    "Overview",
    "RecordView",
    "ResultList",
    "metric_report",
    "overview",
    "record_view",
    "result_list",
]

RE_EVALUATIONS_SHOWN = 100


@dataclass(frozen=True)
class Overview:
    """The report's numbers for a scope."""

    snapshots: int
    evaluations: int
    dead_letters_open: int
    metrics: Mapping[str, MetricReport]


def metric_report(counts: Iterable[VerdictCount]) -> MetricReport:
    """One metric's report numbers from its grouped counts (the rules of ``evalq report``)."""
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    passed = verdicts = unscored = missing = 0
    for c in counts:
        by_status[c.status] += c.n
        by_reason[c.reason] += c.n
        if c.status == "SKIPPED" and c.reason in MISSING_EVIDENCE_REASONS:
            missing += c.n
        if c.status == "DECIDED" and c.passed is None:
            unscored += c.n
        elif c.status == "DECIDED":
            verdicts += c.n
            passed += c.n if c.passed else 0
    total = sum(by_status.values())
    return MetricReport(
        by_status=dict(sorted(by_status.items())),
        by_reason=dict(sorted(by_reason.items())),
        total=total,
        passed=passed,
        failed=verdicts - passed,
        decided_without_verdict=unscored,
        pass_rate=wilson(passed, verdicts),
        coverage=wilson(by_status["DECIDED"], total),
        missing_evidence=wilson(missing, total),
        weighted=None,
    )


def overview(store: Store, scope: RecordScope | None) -> Overview:
    """Totals and every metric's numbers in ``scope`` (grouped counts: a handful of queries)."""
    grouped: dict[str, list[VerdictCount]] = defaultdict(list)
    for count in store.verdict_counts(scope):
        grouped[count.metric_id].append(count)
    return Overview(
        snapshots=store.count_snapshots(scope),
        evaluations=store.count_evaluations(scope),
        dead_letters_open=sum(store.open_dead_letter_counts().values()),
        metrics={m: metric_report(c) for m, c in sorted(grouped.items())},
    )


@dataclass(frozen=True)
class ResultList:
    """One page of one metric's results and the cursor of the next page."""

    metric_id: str
    numbers: MetricReport
    rows: tuple[ResultListRow, ...]
    next_before: int | None


def result_list(
    store: Store,
    chosen: ResultFilter,
    scope: RecordScope | None,
    before: int | None,
    limit: int,
) -> ResultList:
    """A page of results; the metric's numbers in the scope (for the filter links) beside it."""
    counts = [c for c in store.verdict_counts(scope) if c.metric_id == chosen.metric_id]
    rows, cursor = store.result_list(chosen, scope, before=before, limit=limit)
    return ResultList(chosen.metric_id, metric_report(counts), rows, cursor)


@dataclass(frozen=True)
class RecordView:
    """Everything the record page shows of one evaluation."""

    stored: StoredEvaluation
    snapshot: SnapshotIndex | None
    content_code: str | None
    window_events: tuple[Mapping[str, Any], ...]
    contexts: Any
    outcomes: tuple[OutcomeLink, ...]
    pending: tuple[str, ...]
    evaluations: tuple[EvaluationLink, ...]


def _window(content: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """The events up to and including the window's cutoff: what the judge could see."""
    events = content.get("events") or []
    cutoff = (content.get("window") or {}).get("cutoff_event_id")
    seen: list[Mapping[str, Any]] = []
    for event in events:
        seen.append(event)
        if event.get("id") == cutoff:
            break
    return tuple(seen)


def _content(store: Store, index: SnapshotIndex | None) -> tuple[str | None, dict[str, Any]]:
    """(reason code when the content cannot be shown, the content)."""
    if index is None:
        return "UNKNOWN_SNAPSHOT", {}
    if not index.has_content:
        return "CONTENT_NOT_KEPT", {}
    try:
        record = store.get_snapshot(index.snapshot_id)
    except StoreError as exc:
        return exc.code, {}
    if record is None:  # expired between the two reads
        return "CONTENT_NOT_KEPT", {}
    content = thaw(record.content)
    return None, content if isinstance(content, dict) else {}


def record_view(store: Store, evaluation_id: str) -> RecordView | None:
    """The evaluation, its snapshot's facts, the evidence window, outcomes and re-evaluations."""
    stored = store.get_evaluation(evaluation_id)
    if stored is None:
        return None
    snapshot_id = stored.record.snapshot_id
    index = store.snapshot_index(snapshot_id)
    code, content = _content(store, index)
    return RecordView(
        stored=stored,
        snapshot=index,
        content_code=code,
        window_events=_window(content),
        contexts=content.get("contexts"),
        outcomes=store.links_for_evaluation(evaluation_id),
        pending=store.pending_outcomes(evaluation_id),
        evaluations=store.snapshot_evaluations(snapshot_id, RE_EVALUATIONS_SHOWN),
    )
