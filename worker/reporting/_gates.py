"""CI gates over a report: ``evalq report --fail-under METRIC=RATE``.

A gate passes when the metric's pass rate is known well enough to be at least ``RATE``: the
lower bound of its 95 % interval (the sampling-weighted one when the report is weighted) is at
or above ``RATE``, and the rate speaks for enough of the traffic — scorable coverage (DECIDED /
all results of the metric) at or above ``min_coverage``. Otherwise it fails with a reason code:

- ``NO_RESULTS``: the metric has no result in scope;
- ``LOW_COVERAGE``: coverage under ``min_coverage`` (too much was skipped, inconclusive or
  failed to evaluate for the rate to speak for the traffic);
- ``NO_VERDICTS``: no DECIDED result with a verdict, so there is no rate to bound;
- ``UNDER_RATE``: the interval's lower bound is under ``RATE``.

The metric's numbers are the report's ``metrics``: each unit once, with its newest evaluation,
under the metric-set version that evaluated most recently (``EvalReport.metrics_version``) —
or every version pooled with ``--pool-versions``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ._frozen import Frozen
from ._model import EvalReport, MetricReport
from ._status import BREACH_EXIT_CODE

__all__ = ["DEFAULT_MIN_COVERAGE", "GATE_EXIT_CODE", "Gate", "GateResult", "check_gates"]

DEFAULT_MIN_COVERAGE = 0.5
"""Scorable coverage a gated metric needs by default."""
GATE_EXIT_CODE = BREACH_EXIT_CODE
"""The exit status of a failed gate: a threshold breached, as in ``evalq status`` (2: config)."""

GateReason = Literal["PASS", "NO_RESULTS", "LOW_COVERAGE", "NO_VERDICTS", "UNDER_RATE"]


class Gate(Frozen):
    """``METRIC=RATE``: the metric's pass rate must be at least ``min_rate``."""

    metric_id: str
    min_rate: float

    @classmethod
    def parse(cls, text: str) -> Gate:
        """``METRIC=RATE`` with RATE in [0, 1]; ``ValueError`` naming the form otherwise."""
        metric_id, sep, rate = text.partition("=")
        try:
            value = float(rate)
        except ValueError:
            value = -1.0
        if not sep or not metric_id.strip() or not 0 <= value <= 1:
            raise ValueError(f"{text!r}: expected METRIC=RATE with RATE between 0 and 1")
        return cls(metric_id=metric_id.strip(), min_rate=value)


class GateResult(Frozen):
    """One gate's outcome, with the numbers it was decided on (null when unknown)."""

    metric_id: str
    min_rate: float
    min_coverage: float
    lower: float | None
    rate: float | None
    coverage: float | None
    verdicts: int
    weighted: bool
    reason: GateReason

    @property
    def passed(self) -> bool:
        """True when the gate holds."""
        return self.reason == "PASS"

    def line(self) -> str:
        """``grounded >= 0.8: lower 0.712, rate 0.850 (n=20), coverage 0.900: PASS`` (or FAIL)."""
        kind = "weighted rate" if self.weighted else "rate"
        numbers = (
            f"lower {_num(self.lower)}, {kind} {_num(self.rate)} (n={self.verdicts}), "
            f"coverage {_num(self.coverage)}"
        )
        return f"{self.metric_id} >= {self.min_rate:g}: {numbers}: {self._verdict()}"

    def _verdict(self) -> str:
        why = {
            "PASS": "",
            "NO_RESULTS": "no result of this metric in scope",
            "LOW_COVERAGE": f"coverage under --min-coverage {self.min_coverage:g}",
            "NO_VERDICTS": "no DECIDED result with a verdict",
            "UNDER_RATE": f"lower bound under {self.min_rate:g}",
        }[self.reason]
        return "PASS" if self.passed else f"FAIL ({self.reason}: {why})"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _reason(
    metric: MetricReport | None, lower: float | None, gate: Gate, min_coverage: float
) -> GateReason:
    if metric is None or metric.total == 0:
        return "NO_RESULTS"
    coverage = metric.coverage.value or 0.0
    if coverage < min_coverage:
        return "LOW_COVERAGE"
    if lower is None:
        return "NO_VERDICTS"
    return "UNDER_RATE" if lower < gate.min_rate else "PASS"


def check_gate(report: EvalReport, gate: Gate, min_coverage: float) -> GateResult:
    """The gate decided on the report's numbers for its metric (see the module docstring)."""
    metric = report.metrics.get(gate.metric_id)
    weighted = metric is not None and metric.weighted is not None
    rate = lower = coverage = None
    verdicts = 0
    if metric is not None:
        chosen = metric.weighted.pass_rate if metric.weighted is not None else metric.pass_rate
        rate, lower, coverage = chosen.value, chosen.low, metric.coverage.value
        verdicts = metric.passed + metric.failed
    return GateResult(
        metric_id=gate.metric_id,
        min_rate=gate.min_rate,
        min_coverage=min_coverage,
        lower=lower,
        rate=rate,
        coverage=coverage,
        verdicts=verdicts,
        weighted=weighted,
        reason=_reason(metric, lower, gate, min_coverage),
    )


def check_gates(
    report: EvalReport, gates: Iterable[Gate], min_coverage: float = DEFAULT_MIN_COVERAGE
) -> tuple[GateResult, ...]:
    """Every gate, in the order given."""
    return tuple(check_gate(report, gate, min_coverage) for gate in gates)
