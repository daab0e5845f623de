"""The reader over the store: ``evalq report`` and ``evalq status``, never a writer.

``evalq report`` says what the recorded evaluations say, with coverage and uncertainty beside
rates; ``evalq status`` (:func:`collect_status`) says whether evaluation keeps up and why traces
were not scored. Modules, one concept each: ``_statistics`` (intervals), ``_scope``
(:class:`ReportScope`), ``_model`` (:class:`EvalReport` and its parts), ``_tallies`` and
``_gold`` (accumulators), ``_compute`` (:func:`build_report`, :func:`compute_report`),
``_terminal``, ``_html`` (the static page), ``_status`` and ``_gates`` (``--fail-under``:
:func:`check_gates`, the CI gate that respects coverage; see that module).

:func:`build_report` reads records from the store (nothing is written) and
:func:`compute_report` turns them into one frozen :class:`EvalReport` — a pure function, so the
terminal table, ``--json`` and ``--html`` all show the same numbers. This package imports no
``worker.cli``, and ``producer`` imports nothing of it.

Scope
-----
A :class:`ReportScope` narrows the records: a time range on the evaluation's ``created_at``
(``since`` inclusive, ``until`` exclusive), a backfill id, a lane, a metric set (its name, e.g.
``agent``, and/or its exact version), a slice (agent version, tool, environment — exact matches)
and a set of metric ids (``metric_ids``; empty means all). A backfill's units are tied to it
through their *sends* (the store's provenance records, docs/records.md): ``--backfill ID``
selects the snapshots with a send whose rule is ``backfill:<id>`` (``backfill:<id>/<rule>`` with
a sampler), under every metric-set version they were evaluated with — a unit sent live first and
backfilled later included; ``--lane`` selects the snapshots with a send on that lane.

Counting (docs/records.md)
--------------------------
Each unit (snapshot) counts once per metric-set version, with its newest evaluation in the time
range (``RecordScope.newest``); superseded evaluations and duplicate sends are counted beside
(``superseded_evaluations``, ``sends``, ``duplicate_sends``), never as evidence. Metric-set
versions are shown side by side (``versions``); ``metrics``, gold, coverage, outcomes and the
gates speak for the version that evaluated most recently (``metrics_version``), unless
``pool_versions`` (``--pool-versions``) pools them, which the report then says.

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
  than 1 (weight = 1/sampling rate of the unit's first send, recorded on the snapshot row; later
  sends do not re-weight it). Estimator: the weighted
  proportion (Hájek ratio estimator) ``p = Σ w·y / Σ w``, with a Wilson interval computed at
  Kish's effective sample size ``n_eff = (Σ w)² / Σ w²``. It treats the sample as independent
  draws with unequal weights (no stratification or finite-population correction): an honest,
  slightly conservative interval for deterministic per-slice sampling.
- **Latency**: evaluation ``elapsed_s`` (the engine's wall time of the whole metric group),
  nearest-rank P50/P95 ``sorted[ceil(p·n) - 1]`` (docs/semantics.md §8), plus a histogram.
- **Usage**: requests started, responses that reported usage and their token sums;
  ``incomplete`` when responses with usage < requests (the total cost is then a lower bound).

Gold labels (docs/semantics.md §8)
----------------------------------
Gold labels ride in the snapshot (``Snapshot.labels``, never sent to a judge). The *labelled set*
is every evaluation in scope whose snapshot carries at least one label; the engine's Summary is
computed over it per metric and per *scenario* — the snapshot's slice field chosen by
``scenario_by`` (``tool`` by default; ``agent_version``, ``environment`` or ``source``, the
importer that read the trace), ``(none)`` when unset, in first-seen order. The counting rules
(docs/semantics.md §8): every row of the metric counts in ``total``; INCONCLUSIVE/SKIPPED/ERROR
count labelled and unlabelled rows; a DECIDED row with a label is ``correct``/``incorrect`` by
its ``label`` (label gold) or ``passed`` (verdict gold), ``unscored`` when that value is null;
``accuracy = correct / labelled`` with the full denominator (0 when nothing is labelled — read
as "no accuracy").

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
evaluation-level verdict (``(evaluation)``: every metric DECIDED and passed,
docs/semantics.md §6.3). Both records are only read.

A report that includes any synthetic-judge evaluation says ``SYNTHETIC`` prominently.
"""

from __future__ import annotations

from ._compute import build_report, compute_report, sampling_view
from ._gates import DEFAULT_MIN_COVERAGE, GATE_EXIT_CODE, Gate, GateResult, check_gates
from ._html import PLOT_IDS, render_html
from ._model import (
    CALIBRATION_BINS,
    LATENCY_EDGES_MS,
    MISSING_EVIDENCE_REASONS,
    STATUSES,
    Calibration,
    CalibrationBin,
    Confusion,
    CoveragePoint,
    CoverageSeries,
    EvalReport,
    GoldReport,
    HistogramBin,
    JudgeUse,
    Latency,
    MetricReport,
    OutcomeRow,
    OutcomeView,
    SamplingRow,
    SamplingView,
    SliceCoverage,
    SliceRow,
    StoreTotals,
    UsageTotals,
    WeightedRates,
    probability_source,
)
from ._scope import ReportScope, parse_when
from ._statistics import Z95, Rate, WeightedRate, nearest_rank, weighted_wilson, wilson
from ._status import (
    BREACH_EXIT_CODE,
    BackfillStatus,
    BrokerStatus,
    Decision,
    Decisions,
    LaneStatus,
    QueuesStatus,
    StatusReport,
    StatusThresholds,
    Throughput,
    WorkersStatus,
    backfill_statuses,
    collect_status,
    decisions_from_counts,
    redact_url,
    render_status,
)
from ._terminal import render_terminal

__all__ = [
    "BREACH_EXIT_CODE",
    "CALIBRATION_BINS",
    "DEFAULT_MIN_COVERAGE",
    "GATE_EXIT_CODE",
    "LATENCY_EDGES_MS",
    "MISSING_EVIDENCE_REASONS",
    "PLOT_IDS",
    "STATUSES",
    "Z95",
    "BackfillStatus",
    "BrokerStatus",
    "Calibration",
    "CalibrationBin",
    "Confusion",
    "CoveragePoint",
    "CoverageSeries",
    "Decision",
    "Decisions",
    "EvalReport",
    "Gate",
    "GateResult",
    "GoldReport",
    "HistogramBin",
    "JudgeUse",
    "LaneStatus",
    "Latency",
    "MetricReport",
    "OutcomeRow",
    "OutcomeView",
    "QueuesStatus",
    "Rate",
    "ReportScope",
    "SamplingRow",
    "SamplingView",
    "SliceCoverage",
    "SliceRow",
    "StatusReport",
    "StatusThresholds",
    "StoreTotals",
    "Throughput",
    "UsageTotals",
    "WeightedRate",
    "WeightedRates",
    "WorkersStatus",
    "backfill_statuses",
    "build_report",
    "check_gates",
    "collect_status",
    "compute_report",
    "decisions_from_counts",
    "nearest_rank",
    "parse_when",
    "probability_source",
    "redact_url",
    "render_html",
    "render_status",
    "render_terminal",
    "sampling_view",
    "weighted_wilson",
    "wilson",
]
