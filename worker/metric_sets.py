"""Named metric sets: what a worker evaluates, and the version that makes evaluations idempotent.

A snapshot names its metric set (``Snapshot.metric_set``); the worker resolves the name here
with its own thresholds, judge and limits. The **metric-set version** is a digest over everything
that can change a result for the same snapshot: the set's name, every metric's (id, version) —
built-in versions embed the thresholds —, the judge identity (kind and model) and the
question/state limits.
One evaluation is stored per (snapshot_id, metric-set version): re-sending a snapshot writes nothing
new, while switching from the synthetic judge to a real one (or recalibrating thresholds) produces a
new evaluation instead of being silently skipped. The time budget is not part of the version: a
retry with more time is not a different question.

Sets:

- ``agent``: the seven JEV agent metrics (one packed judge request on a typical trace).
- ``agent+trajectory``: the seven plus ``trajectory_match`` (STRICT order, arguments compared),
  which needs ``expected_tool_calls`` on the snapshot and never calls the judge.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from worker.canonical_json import canonical_json
from worker.evaluation import (
    Limits,
    MatchMode,
    Metric,
    Thresholds,
    agent_metrics,
    trajectory_match,
)

__all__ = ["METRIC_SETS", "MetricSet", "UnknownMetricSetError", "build_metric_set"]


class UnknownMetricSetError(ValueError):
    """A snapshot asked for a metric set this worker does not know (``UNKNOWN_METRIC_SET``)."""

    code = "UNKNOWN_METRIC_SET"


def _agent(thresholds: Thresholds) -> tuple[Metric, ...]:
    return tuple(agent_metrics(thresholds))


def _agent_trajectory(thresholds: Thresholds) -> tuple[Metric, ...]:
    return (*_agent(thresholds), trajectory_match(MatchMode.STRICT, match_arguments=True))


METRIC_SETS: dict[str, Callable[[Thresholds], tuple[Metric, ...]]] = {
    "agent": _agent,
    "agent+trajectory": _agent_trajectory,
}
"""Builders by name; keep in step with ``worker.settings.METRIC_SET_NAMES``."""


@dataclass(frozen=True)
class MetricSet:
    """Resolved metrics plus the digest that identifies their results."""

    name: str
    metrics: tuple[Metric, ...]
    version: str
    judge: str

    @property
    def metric_ids(self) -> tuple[str, ...]:
        """Metric ids in configuration order."""
        return tuple(m.id for m in self.metrics)


def _digest(name: str, metrics: tuple[Metric, ...], judge: str, limits: Limits) -> str:
    material = {
        "set": name,
        "metrics": [[m.id, m.version] for m in metrics],
        "judge": judge,
        "max_questions": limits.max_questions,
        "max_state_chars": limits.max_state_chars,
    }
    return hashlib.sha256(canonical_json(material).encode("utf-8")).hexdigest()[:16]


def build_metric_set(name: str, *, thresholds: Thresholds, judge: str, limits: Limits) -> MetricSet:
    """Resolve ``name``; :class:`UnknownMetricSetError` if it is not one of :data:`METRIC_SETS`.

    ``judge`` is the judge identity (e.g. ``synthetic``, ``systemone:jev-latest``).
    """
    builder = METRIC_SETS.get(name)
    if builder is None:
        raise UnknownMetricSetError(name)
    metrics = builder(thresholds)
    version = f"{name}@{_digest(name, metrics, judge, limits)}"
    return MetricSet(name=name, metrics=metrics, version=version, judge=judge)
