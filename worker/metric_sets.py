"""Named metric sets: what a worker evaluates, and the version that makes evaluations idempotent.

A snapshot names its metric set (``Snapshot.metric_set``); the worker resolves the name here
with its own thresholds, judge and limits. The **metric-set version** is a digest over everything
that can change a result for the same snapshot: the set's name, every metric's (id, version) —
built-in versions embed the thresholds —, the judge identity (kind and model), the
question/state limits and the configuration's ``version`` (``[evaluation] version``, when set).
A configured metric list changes the metrics, hence the version; an unchanged configuration
reuses it.
One evaluation is stored per (snapshot_id, metric-set version): re-sending a snapshot writes nothing
new, while switching from the synthetic judge to a real one (or recalibrating thresholds) produces a
new evaluation instead of being silently skipped. The time budget is not part of the version: a
retry with more time is not a different question.

Sets:

- ``agent``: the seven JEV agent metrics (one packed judge request on a typical trace).
- ``agent+trajectory``: the seven plus ``trajectory_match`` (STRICT order, arguments compared),
  which needs ``expected_tool_calls`` on the snapshot and never calls the judge.

A configured metric list (``[evaluation] metrics``, :func:`metric_names` are the known ones)
replaces the seven of ``agent``; ``agent+trajectory`` is that list plus ``trajectory_match``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
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

__all__ = [
    "METRIC_SETS",
    "TRAJECTORY_MATCH",
    "MetricSet",
    "UnknownMetricSetError",
    "build_metric_set",
    "metric_names",
]

TRAJECTORY_MATCH = "trajectory_match"
"""The opt-in metric: never part of the default list, named in ``metrics`` to enable it."""
_LISTED_SETS = ("agent", "agent+trajectory")
"""The sets a configured metric list defines (other sets keep their own metrics)."""


class UnknownMetricSetError(ValueError):
    """A snapshot asked for a metric set this worker does not know (``UNKNOWN_METRIC_SET``)."""

    code = "UNKNOWN_METRIC_SET"


def _agent(thresholds: Thresholds) -> tuple[Metric, ...]:
    return tuple(agent_metrics(thresholds))


def _trajectory() -> Metric:
    return trajectory_match(MatchMode.STRICT, match_arguments=True)


def _agent_trajectory(thresholds: Thresholds) -> tuple[Metric, ...]:
    return (*_agent(thresholds), _trajectory())


@functools.cache
def metric_names() -> tuple[str, ...]:
    """Metric ids a configured list may name: the seven agent metrics, then the opt-in ones."""
    return (*(m.id for m in _agent(Thresholds(0.2, 0.8))), TRAJECTORY_MATCH)


def _listed(
    names: Sequence[str], thresholds: Thresholds, *, trajectory: bool
) -> tuple[Metric, ...]:
    """The metrics ``names`` lists, in that order (``trajectory`` appends trajectory_match)."""
    by_id: dict[str, Metric] = {m.id: m for m in _agent(thresholds)}
    by_id[TRAJECTORY_MATCH] = _trajectory()
    unknown = [name for name in names if name not in by_id]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}")
    chosen = [by_id[name] for name in names]
    if trajectory and TRAJECTORY_MATCH not in names:
        chosen.append(by_id[TRAJECTORY_MATCH])
    return tuple(chosen)


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


def _digest(
    name: str, metrics: tuple[Metric, ...], judge: str, limits: Limits, config_version: str | None
) -> str:
    material: dict[str, object] = {
        "set": name,
        "metrics": [[m.id, m.version] for m in metrics],
        "judge": judge,
        "max_questions": limits.max_questions,
        "max_state_chars": limits.max_state_chars,
    }
    if config_version is not None:  # absent when unset: versions of earlier releases still match
        material["version"] = config_version
    return hashlib.sha256(canonical_json(material).encode("utf-8")).hexdigest()[:16]


def build_metric_set(
    name: str,
    *,
    thresholds: Thresholds,
    judge: str,
    limits: Limits,
    metrics: Sequence[str] | None = None,
    config_version: str | None = None,
) -> MetricSet:
    """Resolve ``name``; :class:`UnknownMetricSetError` if it is not one of :data:`METRIC_SETS`.

    ``judge`` is the judge identity (e.g. ``synthetic``, ``systemone:jev-latest``). ``metrics``
    (the configuration's list; None: the set's own) defines ``agent`` and ``agent+trajectory``.
    ``config_version`` (the configuration's ``version``) is part of the version, readable in it:
    ``agent:orders-v1@<digest>``.
    """
    builder = METRIC_SETS.get(name)
    if builder is None:
        raise UnknownMetricSetError(name)
    if metrics is not None and name in _LISTED_SETS:
        chosen = _listed(metrics, thresholds, trajectory=name == "agent+trajectory")
    else:
        chosen = builder(thresholds)
    label = name if config_version is None else f"{name}:{config_version}"
    version = f"{label}@{_digest(name, chosen, judge, limits, config_version)}"
    return MetricSet(name=name, metrics=chosen, version=version, judge=judge)
