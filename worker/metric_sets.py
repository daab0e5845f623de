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

- ``agent``: the seven JEV agent metrics (one packed judge request on a typical trace), then
  ``tool_execution`` (deterministic: how each call of the invocation executed, recorded apart
  from whether it was the right call).
- ``agent+trajectory``: ``agent`` plus ``trajectory_match`` (STRICT order, arguments compared),
  which needs ``expected_tool_calls`` on the snapshot and never calls the judge.
- ``tool_call``: ``call_appropriate`` (judged on the state before the proposed call) and
  ``call_valid`` (deterministic: the tool is in the catalog and the arguments fit its schema).
  A snapshot of unit ``tool_call`` that names the default set (``agent``, whose metrics all
  need a finished invocation) is evaluated with this set: see :func:`set_for_unit`. A snapshot
  that names another set keeps it.

A configured metric list (``[evaluation] metrics``, :func:`metric_names` are the known ones)
replaces the eight of ``agent``; ``agent+trajectory`` is that list plus ``trajectory_match``;
``tool_call`` keeps its own two.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from worker.canonical_json import canonical_json
from worker.evaluation import (
    JudgeFree,
    Limits,
    MatchMode,
    Metric,
    Thresholds,
    ToolExecution,
    agent_metrics,
    tool_call_metrics,
    trajectory_match,
)

__all__ = [
    "DEFAULT_METRIC_SET",
    "METRIC_SETS",
    "TRAJECTORY_MATCH",
    "MetricSet",
    "UnknownMetricSetError",
    "build_metric_set",
    "judge_free_metric_ids",
    "metric_names",
    "reported_metric_ids",
    "set_for_unit",
]

TRAJECTORY_MATCH = "trajectory_match"
"""The opt-in metric: never part of the default list, named in ``metrics`` to enable it."""
_LISTED_SETS = ("agent", "agent+trajectory")
"""The sets a configured metric list defines (other sets keep their own metrics)."""
DEFAULT_METRIC_SET = "agent"
"""What a snapshot names unless told otherwise (``Snapshot.metric_set``'s default)."""
_DEFAULT_BY_UNIT = {"tool_call": "tool_call"}
"""The set that stands for the default one, by unit (units not listed keep ``agent``)."""


class UnknownMetricSetError(ValueError):
    """A snapshot asked for a metric set this worker does not know (``UNKNOWN_METRIC_SET``)."""

    code = "UNKNOWN_METRIC_SET"


def _agent(thresholds: Thresholds) -> tuple[Metric, ...]:
    return (*agent_metrics(thresholds), ToolExecution())


def _trajectory() -> Metric:
    return trajectory_match(MatchMode.STRICT, match_arguments=True)


def _agent_trajectory(thresholds: Thresholds) -> tuple[Metric, ...]:
    return (*_agent(thresholds), _trajectory())


def _every_metric() -> Iterator[Metric]:
    """Each metric of each set, built with any thresholds (ids and kinds do not depend on them)."""
    any_thresholds = Thresholds(0.2, 0.8)
    return (m for build in METRIC_SETS.values() for m in build(any_thresholds))


@functools.cache
def reported_metric_ids() -> tuple[str, ...]:
    """Every metric id some set evaluates, sorted: what a report may be narrowed to."""
    return tuple(sorted({m.id for m in _every_metric()}))


@functools.cache
def judge_free_metric_ids() -> frozenset[str]:
    """Metric ids that never ask the judge (:class:`~worker.evaluation.JudgeFree`): their results
    do not depend on it, so a judge outage or a silent judge leaves them decided."""
    return frozenset(m.id for m in _every_metric() if isinstance(m, JudgeFree))


def metric_names() -> tuple[str, ...]:
    """Metric ids a configured list may name: the agent set's eight, then the opt-in ones."""
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


def _tool_call(thresholds: Thresholds) -> tuple[Metric, ...]:
    return tuple(tool_call_metrics(thresholds))


METRIC_SETS: dict[str, Callable[[Thresholds], tuple[Metric, ...]]] = {
    "agent": _agent,
    "agent+trajectory": _agent_trajectory,
    "tool_call": _tool_call,
}
"""Builders by name; keep in step with ``worker.settings.METRIC_SET_NAMES``."""


def set_for_unit(name: str, unit: str) -> str:
    """The set a snapshot of ``unit`` naming ``name`` is evaluated with.

    The default name stands for its unit's default set (``tool_call`` for a ``tool_call``
    unit); any other name is kept as it is. On the wire a default cannot be told from an
    explicit ``agent``, and the agent metrics would all be SKIPPED on a pre-call window anyway.
    """
    if name != DEFAULT_METRIC_SET:
        return name
    return _DEFAULT_BY_UNIT.get(unit, name)


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
