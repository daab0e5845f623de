"""Compute the report: :func:`build_report` reads the store, :func:`compute_report` is pure.

Reading is all this does (nothing is written); the terminal table, ``--json`` and ``--html``
show the one :class:`EvalReport` computed here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from worker.canonical_json import thaw
from worker.store import (
    EvaluationRow,
    LinkedOutcome,
    ResultRow,
    SampledOutCount,
    SnapshotLabels,
    Store,
)

from ._gold import GoldTally
from ._model import EvalReport, SamplingRow, SamplingView, StoreTotals, VersionReport
from ._scope import ReportScope
from ._tallies import (
    CoverageTally,
    EvaluationTally,
    MetricTally,
    OutcomeTally,
    bucket_origin,
    bucket_size_s,
)

__all__ = ["build_report", "compute_report", "sampling_view"]


def _slice_matches(row: SampledOutCount, scope: ReportScope) -> bool:
    wanted = (scope.agent_version, scope.environment, scope.tool)
    have = (row.agent_version, row.environment, row.tool)
    return all(w is None or w == h for w, h in zip(wanted, have, strict=True))


def sampling_view(tallies: Iterable[SampledOutCount], scope: ReportScope) -> SamplingView:
    """Tally totals for the scope's slice (tallies carry the slice, not a backfill id)."""
    rows = tuple(
        SamplingRow(**t.model_dump(), sampled_out=t.sampled_out)
        for t in tallies
        if _slice_matches(t, scope)
    )
    return SamplingView(
        recorded=bool(rows),
        seen=sum(r.seen for r in rows),
        sampled=sum(r.sampled for r in rows),
        sampled_out=sum(r.sampled_out for r in rows),
        rows=rows,
    )


def _notes(
    scope: ReportScope,
    weighted: bool,
    synthetic: bool,
    versions: Sequence[str],
    headline: str | None,
) -> tuple[str, ...]:
    notes = [
        "Intervals: Wilson score 95%. Pass rate is among DECIDED results with a verdict; "
        "coverage is DECIDED / all results of the metric.",
        "Each unit (snapshot) counts once per metric-set version, with its newest evaluation; "
        "superseded evaluations and duplicate sends (the same unit sent again, live or by "
        "another backfill) are counted beside, never as evidence.",
    ]
    if len(versions) > 1 and headline is None:
        notes.append(
            f"Pooled (--pool-versions): {len(versions)} metric-set versions counted together; "
            "a unit evaluated under k versions counts k times."
        )
    elif len(versions) > 1:
        notes.append(
            f"{len(versions)} metric-set versions, side by side; metrics, gold, coverage, "
            f"outcomes and gates are version {headline} (the most recent). "
            "--pool-versions pools them."
        )
    if weighted:
        notes.append(
            "Weighted: Hajek ratio estimator sum(w*y)/sum(w), w = 1/sampling rate of the "
            "unit's first send, Wilson interval at Kish effective n = (sum w)^2 / sum w^2."
        )
    if scope.backfill_id is not None:
        notes.append(
            f"Backfill {scope.backfill_id}: units with a send whose rule is "
            f"backfill:{scope.backfill_id}[/rule] (a unit sent live first is included). "
            "Sampling tallies carry no backfill id, so sampled-out counts are not shown."
        )
    if synthetic:
        notes.append("SYNTHETIC judge: deterministic placeholder answers, not a model's judgment.")
    return tuple(notes)


def compute_report(
    results: Iterable[ResultRow],
    evaluations: Iterable[EvaluationRow],
    labels: Iterable[SnapshotLabels],
    outcomes: Iterable[LinkedOutcome],
    *,
    scope: ReportScope,
    totals: StoreTotals,
    now: datetime,
    tallies_in: Iterable[SampledOutCount] | None = None,
) -> EvalReport:
    """The report over records already narrowed to ``scope`` (metric ids are applied here).

    ``evaluations`` is consumed first (time range, latency, usage), then ``results`` once.
    ``tallies_in`` are the sampling tallies of the time range (None: not applicable, e.g. a
    backfill scope).
    """
    ev = EvaluationTally()
    for evaluation in evaluations:
        ev.add(evaluation)
    label_rows = list(labels)
    links: dict[str, list[LinkedOutcome]] = defaultdict(list)
    for link in outcomes:
        links[link.evaluation_id].append(link)
    bucket_s = bucket_size_s(ev.first, ev.last)
    tallies = _ResultTallies(
        scope=scope,
        headline=None if scope.pool_versions else ev.headline_version(),
        links=links,
        coverage=CoverageTally(scope.slice_by, bucket_origin(ev.first, bucket_s), bucket_s),
        gold=_gold_tally(label_rows, scope.scenario_by),
    )
    for row in results:
        tallies.add(row)
    sampling = None if tallies_in is None else sampling_view(tallies_in, scope)
    return tallies.report(ev, totals, now, sampling)


def _gold_tally(rows: Sequence[SnapshotLabels], scenario_by: str) -> GoldTally | None:
    if not rows:
        return None
    return GoldTally(
        labels={r.snapshot_id: _label_map(r) for r in rows},
        sources={r.snapshot_id: r.source for r in rows},
        scenario_by=scenario_by,
    )


@dataclass
class _ResultTallies:
    """Per-version metric tallies for every row; the other sections for ``headline`` only
    (every version when it is None: pooled, or nothing in scope)."""

    scope: ReportScope
    headline: str | None
    links: Mapping[str, Sequence[LinkedOutcome]]
    coverage: CoverageTally
    gold: GoldTally | None
    metrics: dict[str, MetricTally] = field(default_factory=dict)
    by_version: dict[str, dict[str, MetricTally]] = field(default_factory=dict)
    outcomes: OutcomeTally = field(init=False)
    weighted: bool = False

    def __post_init__(self) -> None:
        self.outcomes = OutcomeTally(self.links)

    def add(self, row: ResultRow) -> None:
        if not self.scope.wants(row.metric_id):
            return
        column = self.by_version.setdefault(row.metric_set_version, {})
        column.setdefault(row.metric_id, MetricTally()).add(row)
        self.weighted = self.weighted or row.sampling_weight != 1.0
        if self.headline is not None and row.metric_set_version != self.headline:
            return
        self.metrics.setdefault(row.metric_id, MetricTally()).add(row)
        self.coverage.add(row)
        self.outcomes.add(row)
        if self.gold is not None:
            self.gold.add(row)

    def versions(self, ev: EvaluationTally, totals: StoreTotals) -> tuple[VersionReport, ...]:
        names = sorted(set(ev.versions) | set(self.by_version))
        return tuple(
            VersionReport(
                metric_set_version=name,
                evaluations=ev.versions.get(name, 0),
                superseded=totals.superseded.get(name, 0),
                last_evaluated_at=ev.version_last.get(name),
                metrics={
                    m: t.report(self.weighted)
                    for m, t in sorted(self.by_version.get(name, {}).items())
                },
            )
            for name in names
        )

    def report(
        self,
        ev: EvaluationTally,
        totals: StoreTotals,
        now: datetime,
        sampling: SamplingView | None,
    ) -> EvalReport:
        judges = ev.judge_uses()
        synthetic = any(j.synthetic for j in judges)
        versions = self.versions(ev, totals)
        names = [v.metric_set_version for v in versions]
        return EvalReport(
            generated_at=now,
            store=totals.store,
            scope=self.scope,
            synthetic=synthetic,
            judges=judges,
            metric_set_versions=dict(sorted(ev.versions.items())),
            snapshots=totals.snapshots,
            evaluations=len(ev.elapsed_ms),
            superseded_evaluations=sum(totals.superseded.values()),
            sends=totals.sends,
            duplicate_sends=totals.duplicate_sends,
            dead_letters_open=totals.dead_letters_open,
            weighted=self.weighted,
            pooled=self.scope.pool_versions,
            metrics_version=self.headline,
            versions=versions,
            metrics={m: t.report(self.weighted) for m, t in sorted(self.metrics.items())},
            gold=None if self.gold is None else self.gold.report(),
            latency=ev.latency(),
            usage=ev.usage(),
            outcomes=self.outcomes.report(),
            coverage=self.coverage.report(),
            sampling=sampling,
            notes=_notes(self.scope, self.weighted, synthetic, names, self.headline),
        )


def _label_map(row: SnapshotLabels) -> Mapping[str, Mapping[str, Any]]:
    labels = thaw(row.labels)
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(v, dict)}


def build_report(store: Store, scope: ReportScope, *, now: datetime | None = None) -> EvalReport:
    """Read the records in ``scope`` from ``store`` and compute the report (read-only)."""
    records = scope.records()
    sends = store.send_counts(records)
    totals = StoreTotals(
        store=store.location,
        snapshots=store.count_snapshots(records),
        dead_letters_open=sum(store.open_dead_letter_counts().values()),
        superseded={v.metric_set_version: v.superseded for v in store.version_counts(records)},
        sends=sends.sends,
        duplicate_sends=sends.duplicates,
    )
    tallies = None
    if scope.backfill_id is None:
        tallies = store.sampled_out_counts(since=scope.since, until=scope.until)
    return compute_report(
        store.iter_results(scope=records),
        store.iter_evaluation_rows(records),
        store.iter_snapshot_labels(records),
        store.iter_linked_outcomes(records),
        scope=scope,
        totals=totals,
        now=now or datetime.now(UTC),
        tallies_in=tallies,
    )
