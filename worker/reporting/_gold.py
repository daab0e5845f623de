"""Results against gold labels: summaries per metric and scenario, confusion, calibration.

The counting rules are the engine's (:class:`worker.evaluation.SummaryCounter`,
docs/semantics.md §8).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.evaluation import SummaryCounter
from worker.store import ResultRow

from ._model import (
    CALIBRATION_BINS,
    NONE_VALUE,
    Calibration,
    CalibrationBin,
    Confusion,
    GoldReport,
    probability_source,
)
from ._statistics import wilson

__all__ = ["GoldTally"]


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
class GoldTally:
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
