"""What each page shows, read from the store in a bounded number of queries (no template here).

The overview's numbers are the report's (:class:`worker.reporting.MetricReport`: counts, pass
rate, scorable coverage and missing-evidence rate with Wilson intervals), computed from grouped
counts inside the database instead of a pass over every record, so it is unweighted: the
sampling-weighted estimates stay with ``evalq report``. Like the report it counts each unit once
per metric-set version (its newest evaluation); it pools the versions, as
``evalq report --pool-versions`` does (the report shows them side by side by default).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
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
    StoreCode,
    StoredEvaluation,
    StoreError,
    VerdictCount,
)

__all__ = [
    "NUMBERS_TTL_S",
    "Numbers",
    "Overview",
    "RecordView",
    "ResultList",
    "metric_report",
    "overview",
    "record_view",
    "result_list",
]

RE_EVALUATIONS_SHOWN = 100
NUMBERS_TTL_S = 30.0
"""How long one scope's overview numbers are reused: grouping a million results takes seconds,
and overview → metric → record navigation should pay for it once."""
_NUMBERS_KEPT = 64


@dataclass(frozen=True)
class Overview:
    """The report's numbers for a scope."""

    snapshots: int
    evaluations: int
    dead_letters_open: int
    metrics: Mapping[str, MetricReport]
    computed_at: datetime


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
    """Totals and every metric's numbers in ``scope`` (grouped counts: a handful of queries).

    Each unit counts once per metric-set version, with its newest evaluation (``newest`` is
    forced on); versions are pooled, as ``evalq report --pool-versions`` pools them.
    """
    scope = (scope or RecordScope()).model_copy(update={"newest": True})
    grouped: dict[str, list[VerdictCount]] = defaultdict(list)
    for count in store.verdict_counts(scope):
        grouped[count.metric_id].append(count)
    return Overview(
        snapshots=store.count_snapshots(scope),
        evaluations=store.count_evaluations(scope),
        dead_letters_open=sum(store.open_dead_letter_counts().values()),
        metrics={m: metric_report(c) for m, c in sorted(grouped.items())},
        computed_at=datetime.now(UTC),
    )


class Numbers:
    """Overviews by scope, each reused for :data:`NUMBERS_TTL_S` (thread-safe, bounded)."""

    def __init__(self, store: Store, ttl_s: float = NUMBERS_TTL_S) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._kept: OrderedDict[RecordScope | None, tuple[float, Overview]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, scope: RecordScope | None) -> Overview:
        """The scope's overview, computed now unless a fresh one is kept."""
        now = time.monotonic()
        with self._lock:
            kept = self._kept.get(scope)
        if kept is not None and now - kept[0] < self._ttl_s:
            return kept[1]
        fresh = overview(self._store, scope)
        with self._lock:
            self._kept[scope] = (now, fresh)
            self._kept.move_to_end(scope)
            while len(self._kept) > _NUMBERS_KEPT:
                self._kept.popitem(last=False)
        return fresh


@dataclass(frozen=True)
class ResultList:
    """One page of one metric's results and the cursor of the next page."""

    metric_id: str
    numbers: MetricReport
    rows: tuple[ResultListRow, ...]
    next_before: int | None


def result_list(
    store: Store,
    numbers: Numbers,
    chosen: ResultFilter,
    scope: RecordScope | None,
    page: tuple[int | None, int],
) -> ResultList:
    """A page of results (``page``: cursor, size); the metric's numbers in the scope beside it."""
    before, limit = page
    rows, cursor = store.result_list(chosen, scope, before=before, limit=limit)
    report = numbers.get(scope).metrics.get(chosen.metric_id) or metric_report(())
    return ResultList(chosen.metric_id, report, rows, cursor)


@dataclass(frozen=True)
class RecordView:
    """Everything the record page shows of one evaluation."""

    stored: StoredEvaluation
    snapshot: SnapshotIndex | None
    content_code: str | None
    window_events: tuple[Mapping[str, Any], ...]
    contexts: Any
    claims: Any
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
        return StoreCode.UNKNOWN_SNAPSHOT, {}
    if not index.has_content:
        return StoreCode.CONTENT_NOT_KEPT, {}
    try:
        record = store.get_snapshot(index.snapshot_id)
    except StoreError as exc:
        return exc.code, {}
    if record is None:  # expired between the two reads
        return StoreCode.CONTENT_NOT_KEPT, {}
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
        claims=content.get("claims"),
        outcomes=store.links_for_evaluation(evaluation_id),
        pending=store.pending_outcomes(evaluation_id),
        evaluations=store.snapshot_evaluations(snapshot_id, RE_EVALUATIONS_SHOWN),
    )
