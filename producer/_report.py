"""``evalq report``: what the recorded evaluations say, with coverage and uncertainty beside rates.

:func:`build_report` reads records from the store (reading is fine for producers; nothing is
written) and :func:`compute_report` turns them into one frozen :class:`EvalReport` — a pure
function, so the terminal table, ``--json`` and ``--html`` all show the same numbers.

Scope
-----
A :class:`ReportScope` narrows the records: a time range on the evaluation's ``created_at``
(``since`` inclusive, ``until`` exclusive), a backfill id, a metric set (its name, e.g.
``agent``, and/or its exact version), a slice (agent version, tool, environment — exact matches)
and a set of metric ids (``metric_ids``; empty means all). A backfill's evaluations are tied to
it through their snapshot: every snapshot a backfill stamps records the sampling rule
``backfill:<id>`` (``backfill:<id>/<rule>`` with a sampler), so ``--backfill ID`` selects exactly
the evaluations of that backfill's snapshots (under every metric-set version they were evaluated
with). Snapshots enqueued by ``evalq enqueue``/``run`` carry no
backfill rule and are never in a backfill's scope.

Numbers, and how they are computed
----------------------------------
- **Counts** per metric by status and by reason code (every result in scope).
- **Pass rate** = passed / (DECIDED results with a verdict). DECIDED results with ``passed=None``
  (a pure classification) are counted as ``decided_without_verdict`` and left out of it.
- **Scorable coverage** = DECIDED / all results of the metric: how much of the traffic the rate
  speaks for. It is always printed next to the pass rate.
- **Missing-evidence rate** = SKIPPED with ``MISSING_FIELDS``, ``NO_EVIDENCE``,
  ``NO_TOOL_RESULTS`` or ``NO_CLAIMS`` / all results of the metric.
- Every rate carries a **Wilson score 95 % interval** (z = 1.96); a rate over nothing is null.
- **Sampling-weighted estimates** appear when any snapshot in scope has a sampling weight other
  than 1 (weight = 1/sampling rate, recorded on the snapshot). Estimator: the weighted
  proportion (Hájek ratio estimator) ``p = Σ w·y / Σ w``, with a Wilson interval computed at
  Kish's effective sample size ``n_eff = (Σ w)² / Σ w²``. It treats the sample as independent
  draws with unequal weights (no stratification or finite-population correction): an honest,
  slightly conservative interval for deterministic per-slice sampling.
- **Latency**: evaluation ``elapsed_s`` (the engine's wall time of the whole metric group),
  nearest-rank P50/P95 ``sorted[ceil(p·n) - 1]`` (jev-semantics §F), plus a histogram.
- **Usage**: requests started, responses that reported usage and their token sums;
  ``incomplete`` when responses with usage < requests (the total cost is then a lower bound).

Gold labels (jev-semantics §F)
------------------------------
Gold labels ride in the snapshot (``Snapshot.labels``, never sent to a judge). The *labelled set*
is every evaluation in scope whose snapshot carries at least one label; §F's Summary is computed
over it per metric and per *scenario* — the snapshot's slice field chosen by ``scenario_by``
(``tool`` by default; ``agent_version``, ``environment`` or ``source``, the importer that read the
trace), ``(none)`` when unset, in first-seen order. The counting rules are §F's: every row of
the metric counts in ``total``; INCONCLUSIVE/SKIPPED/ERROR count labelled and unlabelled rows;
a DECIDED row with a label is ``correct``/``incorrect`` by its ``label`` (label gold) or
``passed`` (verdict gold), ``unscored`` when that value is null; ``accuracy = correct /
labelled`` with the full denominator (0 when nothing is labelled — read as "no accuracy").

- **Confusion** per labelled metric: expected value (the gold label, or ``pass``/``fail``) x
  actual value (the DECIDED result's label or verdict, ``unscored`` when null, else the status
  name), so each row sums to the labelled count.
- **Calibration** of the judge's probabilities: pairs (probability, outcome) from labelled
  results whose score is a probability. Verdict gold: the metric's ``score`` when its evidence
  holds ``yes_probability`` or choice ``probabilities`` (P(pass)), outcome = gold ``passed``.
  Label gold: top-label calibration, the probability the judge gave its own label, outcome =
  label matches. Rubric, claim-fraction and deterministic scores are not probabilities and are
  left out. Ten equal bins; expected calibration error ``ECE = Σ n_b/N · |observed_b -
  mean_b|``. Each table says where its probabilities come from: ``synthetic`` (the synthetic
  judge), ``self-reported`` (a chat/text model reporting its own probabilities, uncalibrated)
  or ``backend-reported`` (System One).

Sampling
--------
What the producers' samplers left out, from their sampling tallies (summed over tallies that
ended in the time range; a slice filter keeps that slice's rows). ``recorded`` false means no
tally was stored for the range: the sampled-out count is unknown, not 0. Tallies name the
sampler rule, not the backfill, so a backfill-scoped report shows no sampling section.

Outcome-linked view
-------------------
For evaluations with outcome events linked to them (later facts, e.g. ``refund_reversed``), a
table of (metric, original judgment, outcome name, outcome value) → count, plus a row per
evaluation-level verdict (``(evaluation)``: every metric DECIDED and passed, jev-semantics
§C.3). Both records are only read.

A report that includes any synthetic-judge evaluation says ``SYNTHETIC`` prominently.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from worker.canonical_json import canonical_json, thaw
from worker.evaluation import Summary, SummaryCounter
from worker.store import (
    EvaluationRow,
    LinkedOutcome,
    RecordScope,
    ResultRow,
    SampledOutCount,
    SnapshotLabels,
    Store,
)

__all__ = [
    "CALIBRATION_BINS",
    "LATENCY_EDGES_MS",
    "MISSING_EVIDENCE_REASONS",
    "STATUSES",
    "Z95",
    "Calibration",
    "CalibrationBin",
    "Confusion",
    "CoveragePoint",
    "CoverageSeries",
    "EvalReport",
    "GoldReport",
    "HistogramBin",
    "JudgeUse",
    "Latency",
    "MetricReport",
    "OutcomeRow",
    "OutcomeView",
    "Rate",
    "ReportScope",
    "SamplingRow",
    "SamplingView",
    "SliceCoverage",
    "SliceRow",
    "StoreTotals",
    "UsageTotals",
    "WeightedRate",
    "WeightedRates",
    "build_report",
    "compute_report",
    "nearest_rank",
    "parse_when",
    "probability_source",
    "render_terminal",
    "sampling_view",
    "weighted_wilson",
    "wilson",
]

Z95 = 1.959963984540054
"""Two-sided 95 % normal quantile used by every interval."""
STATUSES = ("DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR")
MISSING_EVIDENCE_REASONS = frozenset(
    {"MISSING_FIELDS", "NO_EVIDENCE", "NO_TOOL_RESULTS", "NO_CLAIMS"}
)
CALIBRATION_BINS = 10
LATENCY_EDGES_MS = (0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
"""Histogram bin lower edges; the last bin is open-ended."""
EVALUATION_ROW = "(evaluation)"
"""The outcome view's pseudo-metric: the evaluation's overall verdict (§C.3 ``passed()``)."""
NONE_VALUE = "(none)"
_BUCKET_LADDER_S = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
_MAX_BUCKETS = 48
_VALUE_CHARS = 80

SliceKey = Literal["agent_version", "environment", "tool"]
ScenarioKey = Literal["agent_version", "environment", "tool", "source"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- intervals ---------------------------------------------------------------------------------


class Rate(_Frozen):
    """``numerator / denominator`` with its Wilson 95 % interval (all null when nothing counted)."""

    numerator: int
    denominator: int
    value: float | None
    low: float | None
    high: float | None


class WeightedRate(_Frozen):
    """A sampling-weighted proportion, with the Wilson interval at Kish's effective n."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    weight_sum: float
    effective_n: float


def _wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    z2 = z * z
    denominator = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def wilson(k: int, n: int, z: float = Z95) -> Rate:
    """``k/n`` with its Wilson score interval (``value``/bounds null when ``n == 0``)."""
    if n <= 0:
        return Rate(numerator=k, denominator=n, value=None, low=None, high=None)
    low, high = _wilson_bounds(k / n, n, z)
    return Rate(numerator=k, denominator=n, value=k / n, low=low, high=high)


@dataclass
class _WeightedSums:
    """Running sums for a weighted proportion: n, Σw, Σw², Σw·y."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    hits: float = 0.0

    def add(self, weight: float, y: bool) -> None:
        self.n += 1
        self.total += weight
        self.squares += weight * weight
        self.hits += weight if y else 0.0

    def rate(self, z: float = Z95) -> WeightedRate:
        if self.n == 0 or self.total <= 0:
            return WeightedRate(
                value=None, low=None, high=None, n=self.n, weight_sum=self.total, effective_n=0
            )
        p = self.hits / self.total
        effective_n = self.total * self.total / self.squares
        low, high = _wilson_bounds(p, effective_n, z)
        return WeightedRate(
            value=p, low=low, high=high, n=self.n, weight_sum=self.total, effective_n=effective_n
        )


def weighted_wilson(pairs: Iterable[tuple[float, bool]], z: float = Z95) -> WeightedRate:
    """Weighted proportion ``Σw·y/Σw`` of ``(weight, y)`` pairs, Wilson interval at Kish n_eff."""
    sums = _WeightedSums()
    for weight, y in pairs:
        sums.add(weight, y)
    return sums.rate(z)


def nearest_rank(sorted_values: Sequence[float], percent: int) -> float:
    """``sorted[ceil(p·n) - 1]`` (integer arithmetic), 0 for no values (jev-semantics §F)."""
    if not sorted_values:
        return 0.0
    rank = -(-percent * len(sorted_values) // 100)
    return sorted_values[max(rank, 1) - 1]


# --- scope -------------------------------------------------------------------------------------


class ReportScope(_Frozen):
    """What a report covers (see the module docstring) and how it groups."""

    since: AwareDatetime | None = None
    until: AwareDatetime | None = None
    backfill_id: str | None = None
    metric_set: str | None = None
    metric_set_version: str | None = None
    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None
    metric_ids: tuple[str, ...] = ()
    scenario_by: ScenarioKey = "tool"
    slice_by: SliceKey = "agent_version"

    def records(self) -> RecordScope | None:
        """The store-side filter (None when nothing narrows the records)."""
        scope = RecordScope(
            since=self.since,
            until=self.until,
            backfill_id=self.backfill_id,
            metric_set=self.metric_set,
            metric_set_version=self.metric_set_version,
            agent_version=self.agent_version,
            environment=self.environment,
            tool=self.tool,
        )
        return None if scope == RecordScope() else scope

    def wants(self, metric_id: str) -> bool:
        """True when ``metric_id`` is in the metric set asked for (all when none was)."""
        return not self.metric_ids or metric_id in self.metric_ids


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: datetime) -> datetime:
    """An ISO 8601 date/time (naive means UTC) or a duration ago: ``30m``, ``6h``, ``7d``, ``2w``.

    Raises ``ValueError`` for anything else.
    """
    value = text.strip()
    relative = _RELATIVE.match(value.lower())
    if relative:
        return now - timedelta(seconds=float(relative.group(1)) * _UNIT_S[relative.group(2)])
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        parsed = datetime.combine(date.fromisoformat(value), datetime.min.time())
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# --- the report model --------------------------------------------------------------------------


class WeightedRates(_Frozen):
    """Sampling-weighted pass rate and coverage of one metric."""

    pass_rate: WeightedRate
    coverage: WeightedRate


class MetricReport(_Frozen):
    """One metric: counts, and each rate with its interval (see the module docstring)."""

    by_status: dict[str, int]
    by_reason: dict[str, int]
    total: int
    passed: int
    failed: int
    decided_without_verdict: int
    pass_rate: Rate
    coverage: Rate
    missing_evidence: Rate
    weighted: WeightedRates | None


class JudgeUse(_Frozen):
    """One judge seen in scope and how many evaluations it made."""

    kind: str
    model: str | None
    synthetic: bool
    evaluations: int
    probability_source: str


class HistogramBin(_Frozen):
    """Evaluations with ``low_ms <= elapsed < high_ms`` (``high_ms`` null: open-ended)."""

    low_ms: float
    high_ms: float | None
    n: int


class Latency(_Frozen):
    """Nearest-rank percentiles of evaluation elapsed time (ms), and a histogram."""

    n: int
    p50_ms: float
    p95_ms: float
    histogram: tuple[HistogramBin, ...]


class UsageTotals(_Frozen):
    """Judge requests and reported token usage; ``incomplete`` when some response lacked usage."""

    requests: int
    responses_with_usage: int
    input_tokens: int
    output_tokens: int
    incomplete: bool


class Confusion(_Frozen):
    """``counts[expected][actual]`` for one labelled metric (rows sum to the labelled count)."""

    expected: tuple[str, ...]
    actual: tuple[str, ...]
    counts: dict[str, dict[str, int]]


class CalibrationBin(_Frozen):
    """One reliability bin ``[low, high)`` (the last one includes 1.0)."""

    low: float
    high: float
    n: int
    mean_predicted: float | None
    observed: float | None


class Calibration(_Frozen):
    """Reliability table and expected calibration error of one metric under one judge kind."""

    metric_id: str
    judge_kind: str
    probability_source: str
    kind: Literal["pass_probability", "top_label"]
    n: int
    ece: float | None
    bins: tuple[CalibrationBin, ...]


class GoldReport(_Frozen):
    """§F summaries against gold labels, per metric and per scenario, confusion, calibration."""

    labelled_snapshots: int
    labelled_evaluations: int
    scenario_by: str
    metrics: dict[str, Summary]
    accuracy: dict[str, Rate]
    scenarios: dict[str, dict[str, Summary]]
    confusion: dict[str, Confusion]
    calibration: tuple[Calibration, ...]


class OutcomeRow(_Frozen):
    """How many results with this judgment were later linked to this outcome (name, value)."""

    metric_id: str
    judgment: str
    outcome: str
    value: str
    n: int


class OutcomeView(_Frozen):
    """Evaluations with linked outcomes, and judgment x outcome counts."""

    linked_evaluations: int
    linked_outcomes: int
    rows: tuple[OutcomeRow, ...]


class SliceRow(_Frozen):
    """Scorable coverage of one slice value over every metric result in scope."""

    value: str
    results: int
    coverage: Rate


class CoveragePoint(_Frozen):
    """Results and DECIDED results of one slice value in one time bucket."""

    start: AwareDatetime
    results: int
    decided: int


class CoverageSeries(_Frozen):
    """Coverage of one slice value over time."""

    value: str
    points: tuple[CoveragePoint, ...]


class SliceCoverage(_Frozen):
    """Coverage by slice (``slice_by``), overall and per time bucket of ``bucket_s`` seconds."""

    slice_by: str
    bucket_s: int
    rows: tuple[SliceRow, ...]
    series: tuple[CoverageSeries, ...]


class SamplingRow(_Frozen):
    """Units a producer's sampler saw and sampled for one (rule, rate, lane, slice)."""

    rule: str
    rate: float
    lane: str
    agent_version: str | None
    environment: str | None
    tool: str | None
    seen: int
    sampled: int
    sampled_out: int


class SamplingView(_Frozen):
    """What sampling left out, from the producers' tallies (``recorded`` false: none stored)."""

    recorded: bool
    seen: int
    sampled: int
    sampled_out: int
    rows: tuple[SamplingRow, ...]


class StoreTotals(_Frozen):
    """Counts the store answers directly for the scope."""

    store: str
    snapshots: int
    dead_letters_open: int


class EvalReport(_Frozen):
    """The whole report. ``snapshots``, ``evaluations`` and ``metrics.<id>.by_status/by_reason``
    keep the shape of the first ``evalq report --json``."""

    generated_at: AwareDatetime
    store: str
    scope: ReportScope
    synthetic: bool
    judges: tuple[JudgeUse, ...]
    metric_set_versions: dict[str, int]
    snapshots: int
    evaluations: int
    dead_letters_open: int
    weighted: bool
    metrics: dict[str, MetricReport]
    gold: GoldReport | None
    latency: Latency
    usage: UsageTotals
    outcomes: OutcomeView
    coverage: SliceCoverage
    sampling: SamplingView | None
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-mode dict (what ``--json`` prints)."""
        return self.model_dump(mode="json")


def probability_source(judge_kind: str) -> str:
    """Where a judge's probabilities come from: synthetic, self-reported, backend-reported."""
    return {
        "synthetic": "synthetic",
        "chat": "self-reported",
        "systemone": "backend-reported",
    }.get(judge_kind, "unknown")


# --- accumulators ------------------------------------------------------------------------------


@dataclass
class _MetricTally:
    by_status: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    verdicts: _WeightedSums = field(default_factory=_WeightedSums)
    decided: _WeightedSums = field(default_factory=_WeightedSums)
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


def _count(counter: SummaryCounter, row: ResultRow, gold: Mapping[str, Any] | None) -> None:
    """§F counting, shared with the engine's dataset runner."""
    if gold is None:
        counter.count(row.status, None, None)
    else:
        counter.count(row.status, _actual(row, gold), _wanted(gold))


def _wanted(gold: Mapping[str, Any]) -> str | bool:
    label = gold.get("label")
    return str(label) if label is not None else bool(gold.get("passed"))


def _actual(row: ResultRow, gold: Mapping[str, Any]) -> str | bool | None:
    return row.label if gold.get("label") is not None else row.passed


def _verdict_name(value: bool) -> str:
    return "pass" if value else "fail"


def _confusion_cells(row: ResultRow, gold: Mapping[str, Any]) -> tuple[str, str]:
    wanted = _wanted(gold)
    expected = wanted if isinstance(wanted, str) else _verdict_name(wanted)
    if row.status != "DECIDED":
        return expected, row.status
    actual = _actual(row, gold)
    if actual is None:
        return expected, "unscored"
    return expected, actual if isinstance(actual, str) else _verdict_name(actual)


def _probability_pair(row: ResultRow, gold: Mapping[str, Any]) -> tuple[float, bool] | None:
    """(probability, outcome) for calibration, or None when the score is not a probability."""
    evidence = row.evidence if isinstance(row.evidence, Mapping) else {}
    if gold.get("label") is not None:
        probabilities = evidence.get("probabilities")
        if row.label is None or not isinstance(probabilities, Mapping):
            return None
        p = probabilities.get(row.label)
        if not isinstance(p, int | float) or isinstance(p, bool):
            return None
        return float(p), row.label == gold["label"]
    is_probability = "yes_probability" in evidence or "probabilities" in evidence
    if row.score is None or not is_probability:
        return None
    return row.score, bool(gold.get("passed"))


def _calibration_bins(pairs: Sequence[tuple[float, bool]]) -> tuple[CalibrationBin, ...]:
    groups: list[list[tuple[float, bool]]] = [[] for _ in range(CALIBRATION_BINS)]
    for p, y in pairs:
        index = min(int(p * CALIBRATION_BINS), CALIBRATION_BINS - 1)
        groups[max(index, 0)].append((p, y))
    bins = []
    for index, group in enumerate(groups):
        n = len(group)
        bins.append(
            CalibrationBin(
                low=index / CALIBRATION_BINS,
                high=(index + 1) / CALIBRATION_BINS,
                n=n,
                mean_predicted=sum(p for p, _ in group) / n if n else None,
                observed=sum(1 for _, y in group if y) / n if n else None,
            )
        )
    return tuple(bins)


def _ece(bins: Sequence[CalibrationBin], n: int) -> float | None:
    if n == 0:
        return None
    return sum(b.n / n * abs((b.observed or 0.0) - (b.mean_predicted or 0.0)) for b in bins if b.n)


def _calibration(
    metric_id: str, judge_kind: str, pairs: Sequence[tuple[float, bool]], top_label: bool
) -> Calibration:
    bins = _calibration_bins(pairs)
    return Calibration(
        metric_id=metric_id,
        judge_kind=judge_kind,
        probability_source=probability_source(judge_kind),
        kind="top_label" if top_label else "pass_probability",
        n=len(pairs),
        ece=_ece(bins, len(pairs)),
        bins=bins,
    )


@dataclass
class _GoldTally:
    labels: Mapping[str, Mapping[str, Any]]
    sources: Mapping[str, str | None]
    scenario_by: str
    metrics: dict[str, SummaryCounter] = field(default_factory=dict)
    scenarios: dict[str, dict[str, SummaryCounter]] = field(default_factory=dict)
    confusion: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)
    pairs: dict[tuple[str, str, bool], list[tuple[float, bool]]] = field(default_factory=dict)
    evaluations: set[str] = field(default_factory=set)

    def add(self, row: ResultRow) -> None:
        labels = self.labels.get(row.snapshot_id)
        if labels is None:
            return
        self.evaluations.add(row.evaluation_id)
        gold = labels.get(row.metric_id)
        gold = gold if isinstance(gold, Mapping) else None
        _count(self.metrics.setdefault(row.metric_id, SummaryCounter()), row, gold)
        per = self.scenarios.setdefault(self._scenario(row), {})
        _count(per.setdefault(row.metric_id, SummaryCounter()), row, gold)
        if gold is not None:
            self._labelled(row, gold)

    def _scenario(self, row: ResultRow) -> str:
        if self.scenario_by == "source":
            return self.sources.get(row.snapshot_id) or NONE_VALUE
        value: str | None = getattr(row, self.scenario_by)
        return value or NONE_VALUE

    def _labelled(self, row: ResultRow, gold: Mapping[str, Any]) -> None:
        self.confusion.setdefault(row.metric_id, Counter())[_confusion_cells(row, gold)] += 1
        pair = _probability_pair(row, gold)
        if pair is not None:
            key = (row.metric_id, row.judge_kind, gold.get("label") is not None)
            self.pairs.setdefault(key, []).append(pair)

    def report(self) -> GoldReport:
        summaries = {m: t.summary() for m, t in self.metrics.items()}
        return GoldReport(
            labelled_snapshots=len(self.labels),
            labelled_evaluations=len(self.evaluations),
            scenario_by=self.scenario_by,
            metrics=summaries,
            accuracy={m: wilson(s.correct, s.labelled) for m, s in summaries.items()},
            scenarios={
                name: {m: t.summary() for m, t in per.items()}
                for name, per in self.scenarios.items()
            },
            confusion={m: _confusion(c) for m, c in self.confusion.items()},
            calibration=tuple(
                _calibration(m, kind, pairs, top)
                for (m, kind, top), pairs in sorted(self.pairs.items())
            ),
        )


def _confusion(cells: Counter[tuple[str, str]]) -> Confusion:
    expected = tuple(sorted({e for e, _ in cells}))
    actual = tuple(sorted({a for _, a in cells}))
    counts = {e: {a: cells.get((e, a), 0) for a in actual} for e in expected}
    return Confusion(expected=expected, actual=actual, counts=counts)


def _judgment(row: ResultRow) -> str:
    if row.status == "DECIDED":
        return {True: "passed", False: "failed", None: "decided"}[row.passed]
    return row.status.lower()


def _outcome_value(value: Any) -> str:
    text = canonical_json(thaw(value))
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


@dataclass
class _OutcomeTally:
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
class _CoverageTally:
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


def _bucket_s(first: datetime | None, last: datetime | None) -> int:
    if first is None or last is None:
        return _BUCKET_LADDER_S[0]
    span_s = (last - first).total_seconds()
    return next((b for b in _BUCKET_LADDER_S if span_s / b < _MAX_BUCKETS), _BUCKET_LADDER_S[-1])


def _origin(first: datetime | None, bucket_s: int) -> datetime:
    start = first or datetime(1970, 1, 1, tzinfo=UTC)
    epoch = start.timestamp()
    return datetime.fromtimestamp(epoch - epoch % bucket_s, tz=UTC)


# --- evaluation-level aggregates ---------------------------------------------------------------


@dataclass
class _EvaluationTally:
    elapsed_ms: list[float] = field(default_factory=list)
    judges: Counter[tuple[str, str | None, bool]] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
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


# --- compute -----------------------------------------------------------------------------------


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


def _notes(scope: ReportScope, weighted: bool, synthetic: bool) -> tuple[str, ...]:
    notes = [
        "Intervals: Wilson score 95%. Pass rate is among DECIDED results with a verdict; "
        "coverage is DECIDED / all results of the metric.",
    ]
    if weighted:
        notes.append(
            "Weighted: Hajek ratio estimator sum(w*y)/sum(w), w = 1/sampling rate, "
            "Wilson interval at Kish effective n = (sum w)^2 / sum w^2."
        )
    if scope.backfill_id is not None:
        notes.append(
            f"Backfill {scope.backfill_id}: snapshots whose sampling rule is "
            f"backfill:{scope.backfill_id}[/rule]. Sampling tallies carry no backfill id, "
            "so sampled-out counts are not shown."
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
    ev = _EvaluationTally()
    for evaluation in evaluations:
        ev.add(evaluation)
    label_rows = list(labels)
    links: dict[str, list[LinkedOutcome]] = defaultdict(list)
    for link in outcomes:
        links[link.evaluation_id].append(link)
    bucket_s = _bucket_s(ev.first, ev.last)
    tallies = _ResultTallies(
        scope=scope,
        links=links,
        coverage=_CoverageTally(scope.slice_by, _origin(ev.first, bucket_s), bucket_s),
        gold=_gold_tally(label_rows, scope.scenario_by),
    )
    for row in results:
        tallies.add(row)
    sampling = None if tallies_in is None else sampling_view(tallies_in, scope)
    return tallies.report(ev, totals, now, sampling)


def _gold_tally(rows: Sequence[SnapshotLabels], scenario_by: str) -> _GoldTally | None:
    if not rows:
        return None
    return _GoldTally(
        labels={r.snapshot_id: _label_map(r) for r in rows},
        sources={r.snapshot_id: r.source for r in rows},
        scenario_by=scenario_by,
    )


@dataclass
class _ResultTallies:
    scope: ReportScope
    links: Mapping[str, Sequence[LinkedOutcome]]
    coverage: _CoverageTally
    gold: _GoldTally | None
    metrics: dict[str, _MetricTally] = field(default_factory=dict)
    outcomes: _OutcomeTally = field(init=False)
    weighted: bool = False

    def __post_init__(self) -> None:
        self.outcomes = _OutcomeTally(self.links)

    def add(self, row: ResultRow) -> None:
        if not self.scope.wants(row.metric_id):
            return
        self.metrics.setdefault(row.metric_id, _MetricTally()).add(row)
        self.weighted = self.weighted or row.sampling_weight != 1.0
        self.coverage.add(row)
        self.outcomes.add(row)
        if self.gold is not None:
            self.gold.add(row)

    def report(
        self,
        ev: _EvaluationTally,
        totals: StoreTotals,
        now: datetime,
        sampling: SamplingView | None,
    ) -> EvalReport:
        judges = ev.judge_uses()
        synthetic = any(j.synthetic for j in judges)
        return EvalReport(
            generated_at=now,
            store=totals.store,
            scope=self.scope,
            synthetic=synthetic,
            judges=judges,
            metric_set_versions=dict(sorted(ev.versions.items())),
            snapshots=totals.snapshots,
            evaluations=len(ev.elapsed_ms),
            dead_letters_open=totals.dead_letters_open,
            weighted=self.weighted,
            metrics={m: t.report(self.weighted) for m, t in sorted(self.metrics.items())},
            gold=None if self.gold is None else self.gold.report(),
            latency=ev.latency(),
            usage=ev.usage(),
            outcomes=self.outcomes.report(),
            coverage=self.coverage.report(),
            sampling=sampling,
            notes=_notes(self.scope, self.weighted, synthetic),
        )


def _label_map(row: SnapshotLabels) -> Mapping[str, Mapping[str, Any]]:
    labels = thaw(row.labels)
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(v, dict)}


def build_report(store: Store, scope: ReportScope, *, now: datetime | None = None) -> EvalReport:
    """Read the records in ``scope`` from ``store`` and compute the report (read-only)."""
    records = scope.records()
    totals = StoreTotals(
        store=store.location,
        snapshots=store.count_snapshots(records),
        dead_letters_open=sum(store.open_dead_letter_counts().values()),
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


# --- terminal ----------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _short(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}"


def _rate(rate: Rate) -> str:
    """``83% [44-97] 5/6``: estimate, Wilson 95 % bounds (percent), counts."""
    if rate.value is None:
        return f"— 0/{rate.denominator}"
    bounds = f"[{_short(rate.low)}-{_short(rate.high)}]"
    return f"{_short(rate.value)}% {bounds} {rate.numerator}/{rate.denominator}"


def _weighted(rate: WeightedRate | None) -> str:
    if rate is None or rate.value is None:
        return "—"
    bounds = f"[{_short(rate.low)}-{_short(rate.high)}]"
    return f"{_short(rate.value)}% {bounds} n_eff {rate.effective_n:.1f}"


def _key_column(table: Table, name: str) -> None:
    table.add_column(name, no_wrap=True)


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _banner(report: EvalReport) -> RenderableType:
    if report.synthetic:
        return Panel(
            Text(
                "SYNTHETIC JUDGE — these results are deterministic placeholder answers, "
                "not a model's judgment.",
                style="bold",
            ),
            style="bold black on yellow",
        )
    judges = ", ".join(f"{j.kind} ({j.model or 'default'})" for j in report.judges)
    return Text(f"Judges: {judges or 'none in scope'}")


def _header(report: EvalReport) -> RenderableType:
    lines = [
        f"store: {report.store}",
        f"snapshots: {report.snapshots}  evaluations: {report.evaluations}  "
        f"open dead letters: {report.dead_letters_open}",
        f"metric-set versions: {_pairs(report.metric_set_versions) or '—'}",
    ]
    return Text("\n".join(lines))


def _metrics_table(report: EvalReport) -> Table:
    table = Table(title="Metrics (rate% [95% interval] count)")
    _key_column(table, "metric")
    for name in ("pass rate (DECIDED)", "scorable coverage", "missing evidence"):
        table.add_column(name)
    if report.weighted:
        table.add_column("weighted pass rate")
        table.add_column("weighted coverage")
    for metric_id, m in report.metrics.items():
        cells = [metric_id, _rate(m.pass_rate), _rate(m.coverage), _rate(m.missing_evidence)]
        if report.weighted:
            w = m.weighted
            cells += [_weighted(w.pass_rate if w else None), _weighted(w.coverage if w else None)]
        table.add_row(*cells)
    return table


def _reasons_table(report: EvalReport) -> Table:
    table = Table(title="Statuses and reasons")
    _key_column(table, "metric")
    table.add_column("by status")
    table.add_column("by reason")
    for metric_id, m in report.metrics.items():
        table.add_row(metric_id, _pairs(m.by_status), _pairs(m.by_reason))
    return table


def _gold_tables(gold: GoldReport) -> list[RenderableType]:
    columns = ("total", "labelled", "correct", "incorrect", "inconclusive", "skipped", "errors")
    table = Table(
        title=f"Against gold labels (scenario = {gold.scenario_by})",
        caption="n total, lab labelled, ok correct, bad incorrect, abs inconclusive, skp skipped,"
        " err errors, uns unscored; acc = ok / lab (jev-semantics §F)",
    )
    _key_column(table, "scenario / metric")
    for name in ("n", "lab", "ok", "bad", "abs", "skp", "err", "uns", "acc"):
        table.add_column(name, justify="right", no_wrap=True)
    labelled = {m for m, s in gold.metrics.items() if s.labelled}
    for scenario, summaries in [("(all)", gold.metrics), *gold.scenarios.items()]:
        table.add_row(Text(scenario, style="bold"), end_section=False)
        for metric_id, s in summaries.items():
            if metric_id not in labelled:
                continue  # metrics without labels: JSON only
            accuracy = f"{_short(s.accuracy)}%" if s.labelled else "—"
            values = [str(getattr(s, c)) for c in (*columns, "unscored")]
            table.add_row(f"  {metric_id}", *values, accuracy)
    out: list[RenderableType] = [table]
    for metric_id, c in gold.confusion.items():
        matrix = Table(f"{metric_id}: expected \\ actual", *c.actual, title="Confusion")
        for expected in c.expected:
            matrix.add_row(expected, *(str(c.counts[expected][a]) for a in c.actual))
        out.append(matrix)
    if gold.calibration:
        out.append(_calibration_table(gold.calibration))
    return out


def _calibration_table(calibrations: Sequence[Calibration]) -> Table:
    table = Table("metric", "judge", "probabilities", "n", "ECE", "bins (n: mean→observed)")
    table.title = "Calibration"
    for c in calibrations:
        bins = "; ".join(
            f"{b.low:.1f}-{b.high:.1f} {b.n}: {b.mean_predicted:.2f}→{b.observed:.2f}"
            for b in c.bins
            if b.n and b.mean_predicted is not None and b.observed is not None
        )
        ece = "—" if c.ece is None else f"{c.ece:.3f}"
        source = (
            c.probability_source.upper()
            if c.probability_source == "synthetic"
            else (c.probability_source)
        )
        table.add_row(c.metric_id, c.judge_kind, source, str(c.n), ece, bins)
    return table


def _latency_usage(report: EvalReport) -> Text:
    u = report.usage
    usage = (
        f"usage: {u.requests} requests, {u.responses_with_usage} with usage, "
        f"{u.input_tokens} input + {u.output_tokens} output tokens"
    )
    if u.incomplete:
        usage += " (incomplete: some responses reported no usage)"
    lat = report.latency
    return Text(f"latency (n={lat.n}): P50 {lat.p50_ms:.1f} ms, P95 {lat.p95_ms:.1f} ms\n{usage}")


def _sampling_text(view: SamplingView) -> Text:
    if not view.recorded:
        return Text("sampled out: unknown (no sampling tally recorded for this range)")
    return Text(
        f"sampling: {view.seen} units seen, {view.sampled} sampled, "
        f"{view.sampled_out} sampled out (not evaluated)"
    )


def _outcome_table(view: OutcomeView) -> Table:
    table = Table("metric", "judgment", "outcome", "value", "n")
    table.title = (
        f"Outcome-linked ({view.linked_evaluations} evaluations, {view.linked_outcomes} outcomes)"
    )
    for r in view.rows:
        table.add_row(r.metric_id, r.judgment, r.outcome, r.value, str(r.n))
    return table


def _coverage_table(coverage: SliceCoverage) -> Table:
    table = Table(coverage.slice_by, "results", "scorable coverage", title="Coverage by slice")
    for row in coverage.rows:
        table.add_row(row.value, str(row.results), _rate(row.coverage))
    return table


def render_terminal(report: EvalReport) -> RenderableType:
    """The report as rich renderables (the default ``evalq report`` output)."""
    parts: list[RenderableType] = [_banner(report), _header(report), _metrics_table(report)]
    parts.append(_reasons_table(report))
    parts.append(_coverage_table(report.coverage))
    if report.gold is not None:
        parts.extend(_gold_tables(report.gold))
    parts.append(_latency_usage(report))
    if report.sampling is not None:
        parts.append(_sampling_text(report.sampling))
    if report.outcomes.rows:
        parts.append(_outcome_table(report.outcomes))
    parts.extend(Text(note, style="dim") for note in report.notes)
    if report.synthetic:
        parts.append(_banner(report))
    return Group(*parts)
