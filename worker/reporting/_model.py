"""The report model: :class:`EvalReport` and its parts, frozen (terminal, JSON and HTML alike)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, Field

from worker.evaluation import Summary

from ._frozen import Frozen
from ._scope import ReportScope
from ._statistics import Rate, WeightedRate

__all__ = [
    "CALIBRATION_BINS",
    "EVALUATION_ROW",
    "LATENCY_EDGES_MS",
    "MISSING_EVIDENCE_REASONS",
    "NONE_VALUE",
    "STATUSES",
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
    "SamplingRow",
    "SamplingView",
    "SliceCoverage",
    "SliceRow",
    "StoreTotals",
    "UsageTotals",
    "VersionReport",
    "WeightedRates",
    "probability_source",
]

STATUSES = ("DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR")
MISSING_EVIDENCE_REASONS = frozenset(
    {"MISSING_FIELDS", "NO_EVIDENCE", "NO_TOOL_RESULTS", "NO_CLAIMS"}
)
CALIBRATION_BINS = 10
LATENCY_EDGES_MS = (0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
"""Histogram bin lower edges; the last bin is open-ended."""
EVALUATION_ROW = "(evaluation)"
"""The outcome view's pseudo-metric: the evaluation's overall verdict (``Report.passed()``)."""
NONE_VALUE = "(none)"


class WeightedRates(Frozen):
    """Sampling-weighted pass rate and coverage of one metric."""

    pass_rate: WeightedRate
    coverage: WeightedRate


class MetricReport(Frozen):
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


class JudgeUse(Frozen):
    """One judge seen in scope and how many evaluations it made."""

    kind: str
    model: str | None
    synthetic: bool
    evaluations: int
    probability_source: str


class HistogramBin(Frozen):
    """Evaluations with ``low_ms <= elapsed < high_ms`` (``high_ms`` null: open-ended)."""

    low_ms: float
    high_ms: float | None
    n: int


class Latency(Frozen):
    """Nearest-rank percentiles of evaluation elapsed time (ms), and a histogram."""

    n: int
    p50_ms: float
    p95_ms: float
    histogram: tuple[HistogramBin, ...]


class UsageTotals(Frozen):
    """Judge requests and reported token usage; ``incomplete`` when some response lacked usage."""

    requests: int
    responses_with_usage: int
    input_tokens: int
    output_tokens: int
    incomplete: bool


class Confusion(Frozen):
    """``counts[expected][actual]`` for one labelled metric (rows sum to the labelled count)."""

    expected: tuple[str, ...]
    actual: tuple[str, ...]
    counts: dict[str, dict[str, int]]


class CalibrationBin(Frozen):
    """One reliability bin ``[low, high)`` (the last one includes 1.0)."""

    low: float
    high: float
    n: int
    mean_predicted: float | None
    observed: float | None


class Calibration(Frozen):
    """Reliability table and expected calibration error of one metric under one judge kind."""

    metric_id: str
    judge_kind: str
    probability_source: str
    kind: Literal["pass_probability", "top_label"]
    n: int
    ece: float | None
    bins: tuple[CalibrationBin, ...]


class GoldReport(Frozen):
    """§F summaries against gold labels, per metric and per scenario, confusion, calibration."""

    labelled_snapshots: int
    labelled_evaluations: int
    scenario_by: str
    metrics: dict[str, Summary]
    accuracy: dict[str, Rate]
    scenarios: dict[str, dict[str, Summary]]
    confusion: dict[str, Confusion]
    calibration: tuple[Calibration, ...]


class OutcomeRow(Frozen):
    """How many results with this judgment were later linked to this outcome (name, value)."""

    metric_id: str
    judgment: str
    outcome: str
    value: str
    n: int


class OutcomeView(Frozen):
    """Evaluations with linked outcomes, and judgment x outcome counts."""

    linked_evaluations: int
    linked_outcomes: int
    rows: tuple[OutcomeRow, ...]


class SliceRow(Frozen):
    """Scorable coverage of one slice value over every metric result in scope."""

    value: str
    results: int
    coverage: Rate


class CoveragePoint(Frozen):
    """Results and DECIDED results of one slice value in one time bucket."""

    start: AwareDatetime
    results: int
    decided: int


class CoverageSeries(Frozen):
    """Coverage of one slice value over time."""

    value: str
    points: tuple[CoveragePoint, ...]


class SliceCoverage(Frozen):
    """Coverage by slice (``slice_by``), overall and per time bucket of ``bucket_s`` seconds."""

    slice_by: str
    bucket_s: int
    rows: tuple[SliceRow, ...]
    series: tuple[CoverageSeries, ...]


class SamplingRow(Frozen):
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


class SamplingView(Frozen):
    """What sampling left out, from the producers' tallies (``recorded`` false: none stored)."""

    recorded: bool
    seen: int
    sampled: int
    sampled_out: int
    rows: tuple[SamplingRow, ...]


class StoreTotals(Frozen):
    """Counts the store answers directly for the scope.

    ``superseded``: per metric-set version, evaluations a newer one of the same (snapshot,
    version) replaced (not counted). ``sends``/``duplicate_sends``: every recorded send of the
    scope's snapshots, and those beyond each snapshot's first (the same unit sent live and
    backfilled, or re-sent): provenance, never counted as evidence.
    """

    store: str
    snapshots: int
    dead_letters_open: int
    superseded: dict[str, int] = Field(default_factory=dict)
    sends: int = 0
    duplicate_sends: int = 0


class VersionReport(Frozen):
    """One metric-set version's column: its counted evaluations (each unit's newest), those it
    superseded, when it last evaluated, and its metrics."""

    metric_set_version: str
    evaluations: int
    superseded: int
    last_evaluated_at: AwareDatetime | None
    metrics: dict[str, MetricReport]


class EvalReport(Frozen):
    """The whole report. ``snapshots``, ``evaluations`` and ``metrics.<id>.by_status/by_reason``
    keep the shape of the first ``evalq report --json``.

    Each unit counts once per metric-set version, with its newest evaluation: ``evaluations``
    counts those, ``superseded_evaluations`` the older ones left out, ``duplicate_sends`` the
    sends beyond each unit's first. ``versions`` shows every metric-set version side by side.
    ``metrics`` (and the gold, coverage and outcome sections, and ``--fail-under``) speak for
    ``metrics_version`` — the version that evaluated most recently — unless ``pooled``
    (``--pool-versions``): then for every version together (``metrics_version`` null), a unit
    evaluated under k versions counting k times.
    """

    generated_at: AwareDatetime
    store: str
    scope: ReportScope
    synthetic: bool
    judges: tuple[JudgeUse, ...]
    metric_set_versions: dict[str, int]
    snapshots: int
    evaluations: int
    superseded_evaluations: int
    sends: int
    duplicate_sends: int
    dead_letters_open: int
    weighted: bool
    pooled: bool
    metrics_version: str | None
    versions: tuple[VersionReport, ...]
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
