"""Accumulators that read records once: per metric, outcome links, slice coverage, evaluations."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.canonical_json import canonical_json, thaw
from worker.store import EvaluationRow, LinkedOutcome, ResultRow

from ._model import (
    EVALUATION_ROW,
    LATENCY_EDGES_MS,
    MISSING_EVIDENCE_REASONS,
    NONE_VALUE,
    CoveragePoint,
    CoverageSeries,
    HistogramBin,
    JudgeUse,
    Latency,
    MetricReport,
    OutcomeRow,
    OutcomeView,
    SliceCoverage,
    SliceRow,
    UsageTotals,
    WeightedRates,
    probability_source,
)
from ._statistics import WeightedSums, nearest_rank, wilson

__all__ = [
    "CoverageTally",
    "EvaluationTally",
    "MetricTally",
    "OutcomeTally",
    "bucket_origin",
    "bucket_size_s",
]

_BUCKET_LADDER_S = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
_MAX_BUCKETS = 48
_VALUE_CHARS = 80


@dataclass
class MetricTally:
    by_status: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    verdicts: WeightedSums = field(default_factory=WeightedSums)
    decided: WeightedSums = field(default_factory=WeightedSums)
    passed: int = 0
    missing: int = 0
    unscored: int = 0

    def add(self, row: ResultRow) -> None:
        self.by_status[row.status] += 1
        self.by_reason[row.reason] += 1
        self.decided.add(row.sampling_weight, row.status == "DECIDED")
        if row.status == "SKIPPED" and row.reason in MISSING_EVIDENCE_REASONS:
            self.missing += 1
        if row.status != "DECIDED":
            return
        if row.passed is None:
            self.unscored += 1
            return
        self.verdicts.add(row.sampling_weight, row.passed)
        self.passed += int(row.passed)

    def report(self, weighted: bool) -> MetricReport:
        total = self.decided.n
        extra = None
        if weighted:
            extra = WeightedRates(pass_rate=self.verdicts.rate(), coverage=self.decided.rate())
        return MetricReport(
            by_status=dict(sorted(self.by_status.items())),
            by_reason=dict(sorted(self.by_reason.items())),
            total=total,
            passed=self.passed,
            failed=self.verdicts.n - self.passed,
            decided_without_verdict=self.unscored,
            pass_rate=wilson(self.passed, self.verdicts.n),
            coverage=wilson(self.by_status["DECIDED"], total),
            missing_evidence=wilson(self.missing, total),
            weighted=extra,
        )


def _judgment(row: ResultRow) -> str:
    if row.status == "DECIDED":
        return {True: "passed", False: "failed", None: "decided"}[row.passed]
    return row.status.lower()


def _outcome_value(value: Any) -> str:
    text = canonical_json(thaw(value))
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


@dataclass
class OutcomeTally:
    links: Mapping[str, Sequence[LinkedOutcome]]
    counts: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    overall: dict[str, bool] = field(default_factory=dict)

    def add(self, row: ResultRow) -> None:
        outcomes = self.links.get(row.evaluation_id)
        if not outcomes:
            return
        ok = row.status == "DECIDED" and row.passed is True
        self.overall[row.evaluation_id] = self.overall.get(row.evaluation_id, True) and ok
        for outcome in outcomes:
            key = (row.metric_id, _judgment(row), outcome.name, _outcome_value(outcome.value))
            self.counts[key] += 1

    def report(self) -> OutcomeView:
        counts = Counter(self.counts)
        for evaluation_id, ok in self.overall.items():
            for outcome in self.links[evaluation_id]:
                verdict = "passed" if ok else "not passed"
                counts[(EVALUATION_ROW, verdict, outcome.name, _outcome_value(outcome.value))] += 1
        rows = tuple(
            OutcomeRow(metric_id=m, judgment=j, outcome=o, value=v, n=n)
            for (m, j, o, v), n in sorted(counts.items())
        )
        return OutcomeView(
            linked_evaluations=len(self.links),
            linked_outcomes=sum(len(v) for v in self.links.values()),
            rows=rows,
        )


@dataclass
class CoverageTally:
    slice_by: str
    origin: datetime
    bucket_s: int
    totals: dict[str, list[int]] = field(default_factory=dict)
    buckets: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def add(self, row: ResultRow) -> None:
        value = getattr(row, self.slice_by) or NONE_VALUE
        decided = int(row.status == "DECIDED")
        cell = self.totals.setdefault(value, [0, 0])
        cell[0] += 1
        cell[1] += decided
        index = int((row.created_at - self.origin).total_seconds() // self.bucket_s)
        bucket = self.buckets.setdefault((value, index), [0, 0])
        bucket[0] += 1
        bucket[1] += decided

    def report(self) -> SliceCoverage:
        rows = tuple(
            SliceRow(value=v, results=c[0], coverage=wilson(c[1], c[0]))
            for v, c in sorted(self.totals.items())
        )
        series = tuple(
            CoverageSeries(value=value, points=self._points(value)) for value in sorted(self.totals)
        )
        return SliceCoverage(
            slice_by=self.slice_by, bucket_s=self.bucket_s, rows=rows, series=series
        )

    def _points(self, value: str) -> tuple[CoveragePoint, ...]:
        cells = sorted((i, c) for (v, i), c in self.buckets.items() if v == value)
        return tuple(
            CoveragePoint(
                start=self.origin + timedelta(seconds=i * self.bucket_s),
                results=c[0],
                decided=c[1],
            )
            for i, c in cells
        )


def bucket_size_s(first: datetime | None, last: datetime | None) -> int:
    if first is None or last is None:
        return _BUCKET_LADDER_S[0]
    span_s = (last - first).total_seconds()
    return next((b for b in _BUCKET_LADDER_S if span_s / b < _MAX_BUCKETS), _BUCKET_LADDER_S[-1])


def bucket_origin(first: datetime | None, bucket_s: int) -> datetime:
    start = first or datetime(1970, 1, 1, tzinfo=UTC)
    epoch = start.timestamp()
    return datetime.fromtimestamp(epoch - epoch % bucket_s, tz=UTC)


@dataclass
class EvaluationTally:
    elapsed_ms: list[float] = field(default_factory=list)
    judges: Counter[tuple[str, str | None, bool]] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    version_last: dict[str, datetime] = field(default_factory=dict)
    requests: int = 0
    with_usage: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    first: datetime | None = None
    last: datetime | None = None

    def add(self, row: EvaluationRow) -> None:
        self.elapsed_ms.append(row.elapsed_s * 1000)
        self.judges[(row.judge_kind, row.judge_model, row.synthetic)] += 1
        self.versions[row.metric_set_version] += 1
        last = self.version_last.get(row.metric_set_version)
        if last is None or row.created_at > last:
            self.version_last[row.metric_set_version] = row.created_at
        self.requests += row.requests
        for entry in row.usage:
            self._usage(entry.usage)
        self.first = min(self.first or row.created_at, row.created_at)
        self.last = max(self.last or row.created_at, row.created_at)

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, Mapping):
            return
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        if not (isinstance(tokens_in, int) and isinstance(tokens_out, int)):
            return
        if (
            isinstance(tokens_in, bool)
            or isinstance(tokens_out, bool)
            or min(tokens_in, tokens_out) < 0
        ):
            return
        self.with_usage += 1
        self.input_tokens += tokens_in
        self.output_tokens += tokens_out

    def headline_version(self) -> str | None:
        """The metric-set version that evaluated most recently (ties: the greatest name)."""
        if not self.version_last:
            return None
        return max(self.version_last.items(), key=lambda item: (item[1], item[0]))[0]

    def latency(self) -> Latency:
        ordered = sorted(self.elapsed_ms)
        return Latency(
            n=len(ordered),
            p50_ms=nearest_rank(ordered, 50),
            p95_ms=nearest_rank(ordered, 95),
            histogram=_histogram(ordered),
        )

    def usage(self) -> UsageTotals:
        return UsageTotals(
            requests=self.requests,
            responses_with_usage=self.with_usage,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            incomplete=self.with_usage < self.requests,
        )

    def judge_uses(self) -> tuple[JudgeUse, ...]:
        return tuple(
            JudgeUse(
                kind=kind,
                model=model,
                synthetic=synthetic,
                evaluations=n,
                probability_source=probability_source(kind),
            )
            for (kind, model, synthetic), n in sorted(self.judges.items(), key=repr)
        )


def _histogram(ordered_ms: Sequence[float]) -> tuple[HistogramBin, ...]:
    edges = LATENCY_EDGES_MS
    counts = [0] * len(edges)
    for value in ordered_ms:
        index = max(i for i, edge in enumerate(edges) if value >= edge) if value >= 0 else 0
        counts[index] += 1
    highs: list[float | None] = [*edges[1:], None]
    return tuple(
        HistogramBin(low_ms=low, high_ms=high, n=n)
        for low, high, n in zip(edges, highs, counts, strict=True)
    )
