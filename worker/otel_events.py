"""What a recorded evaluation says as OpenTelemetry ``gen_ai.evaluation.result`` events.

One event per metric result (the GenAI semantic conventions' evaluation event, development
status; docs/otel-events.md). The mapping is pure and imports no OpenTelemetry package: the
exporter (:mod:`worker.otel_export`, the ``otel`` extra) sends what :func:`result_events` returns.

Per result:

- ``gen_ai.evaluation.name``: the metric id;
- ``gen_ai.evaluation.score.value``: the score, when the metric has one;
- ``gen_ai.evaluation.score.label``: for a DECIDED result the metric's label (``correct``,
  ``wrong_tool``, ``ok``…) when it has one, else ``pass``/``fail``; for any other status the
  status in lowercase (``inconclusive``, ``skipped``, ``error``): a bounded set, as the
  convention asks;
- ``gen_ai.evaluation.explanation``: the reason code (``ALL_CLAIMS_REQUIRED``, ``TIMEOUT``…),
  never free text: evidence, questions, answers and snapshot content are never in an event;
- ``error.type``: the reason code of an ERROR result;
- ``evalq.*``: status, verdict, ids and versions (snapshot, evaluation, metric, metric set),
  judge kind, lane, unit and the evidence window (rule, cutoff event id and time).

The event's trace context is the snapshot's OTel provenance (:class:`producer.snapshot.OtelRef`:
trace id and the invocation's root span), so a tracing backend shows it on the evaluated span;
a snapshot from another source gives events without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Protocol

from producer.snapshot import Snapshot
from worker.store import EvaluationRecord, MetricResultRecord

__all__ = [
    "EVENT_NAME",
    "AttributeValue",
    "EventSink",
    "ResultEvent",
    "result_events",
    "score_label",
]

EVENT_NAME: Final = "gen_ai.evaluation.result"
"""The event name of the GenAI semantic conventions."""

AttributeValue = str | bool | int | float
"""The attribute value types an event carries (OTel AnyValue scalars)."""

_DECIDED = "DECIDED"
_ERROR = "ERROR"


@dataclass(frozen=True)
class ResultEvent:
    """One ``gen_ai.evaluation.result`` event: its attributes and the span it belongs to.

    ``trace_id``/``span_id`` are lowercase hex (32 and 16 digits), both set or both ``None``.
    """

    attributes: Mapping[str, AttributeValue]
    trace_id: str | None = None
    span_id: str | None = None


class EventSink(Protocol):
    """Where the handler puts the events of a committed record (``worker.otel_export``)."""

    def emit(self, events: Iterable[ResultEvent]) -> None:
        """Take ``events``; must not block the event loop or raise."""


def score_label(result: MetricResultRecord) -> str:
    """The low-cardinality label: the metric's label, ``pass``/``fail``, or the status."""
    if result.status != _DECIDED:
        return result.status.lower()
    if result.label is not None:
        return result.label
    if result.passed is not None:
        return "pass" if result.passed else "fail"
    return "decided"  # a DECIDED result without verdict or label (a score-only metric)


def _result_attributes(result: MetricResultRecord) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "gen_ai.evaluation.name": result.metric_id,
        "gen_ai.evaluation.score.label": score_label(result),
        "gen_ai.evaluation.explanation": result.reason,
        "evalq.status": result.status,
        "evalq.metric.version": result.metric_version,
    }
    if result.score is not None:
        attributes["gen_ai.evaluation.score.value"] = float(result.score)
    if result.passed is not None:
        attributes["evalq.passed"] = result.passed
    if result.status == _ERROR:
        attributes["error.type"] = result.reason
    return attributes


def _evaluation_attributes(
    snapshot: Snapshot, record: EvaluationRecord, snapshot_id: str, evaluation_id: str
) -> dict[str, AttributeValue]:
    window = snapshot.window
    attributes: dict[str, AttributeValue] = {
        "evalq.snapshot.id": snapshot_id,
        "evalq.evaluation.id": evaluation_id,
        "evalq.metric_set": record.metric_set,
        "evalq.metric_set.version": record.metric_set_version,
        "evalq.judge.kind": record.judge_kind,
        "evalq.judge.synthetic": record.synthetic,
        "evalq.lane": record.lane,
        "evalq.unit.kind": snapshot.unit.kind.value,
        "evalq.window.rule": window.rule.value,
        "evalq.window.cutoff_event_id": window.cutoff_event_id,
    }
    if window.cutoff_time is not None:
        attributes["evalq.window.cutoff_time"] = window.cutoff_time.isoformat()
    return attributes


def result_events(
    snapshot: Snapshot, record: EvaluationRecord, *, snapshot_id: str, evaluation_id: str
) -> tuple[ResultEvent, ...]:
    """One event per metric result of ``record`` (the evaluation of ``snapshot``), in order."""
    shared = _evaluation_attributes(snapshot, record, snapshot_id, evaluation_id)
    otel = snapshot.otel
    trace_id = otel.trace_id if otel is not None else None
    span_id = otel.span_id if otel is not None else None
    return tuple(
        ResultEvent(MappingProxyType({**shared, **_result_attributes(r)}), trace_id, span_id)
        for r in record.results
    )
