"""The wire contract between producers and workers: snapshots and outcome events.

Both sides import this module; it imports neither Celery nor the store. A :class:`Snapshot` is an
immutable, content-addressed cut of one agent trace at an evidence-window cutoff:
``snapshot_id = sha256(canonical JSON of what is evaluated)`` (:func:`content_id`), so the same
content gives the same id on any machine, however it was sent. How it was sent — the
``sampling`` facts (lane, rate, weight, rule: ``backfill:<id>`` for a backfill) and the
``source`` importer name — are :data:`PROVENANCE_FIELDS`: carried on the wire and kept by the
store beside the snapshot (one send record per delivered message), never part of the id.
The OTel trace and root-span ids (``otel``) are provenance too, and left out of the wire form
while unset.
The queue topology (lanes, exchange, task names, headers) is :mod:`producer.topology`'s,
re-exported here.

Exceptions::

    ValueError
     └── WindowViolation   (code WINDOW_VIOLATION: an event lies after the snapshot's own cutoff)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    WrapSerializer,
    field_validator,
    model_validator,
)

from worker.canonical_json import FrozenJson, canonical_json, frozen_json
from worker.evaluation import Trace

from ._events import Contract, Event, EventType, NonBlank, ToolRound, ToolSpec, UtcTime
from ._projection import project, session_requests
from .topology import (
    ENQUEUED_AT_HEADER,
    EVALUATE_TASK,
    LANE_EXCHANGE,
    LANE_QUEUES,
    OUTCOME_TASK,
    REEVALUATE_TASK,
    TALLY_TASK,
    TASK_LANES,
    TASK_NAMES,
    Lane,
)

__all__ = [
    "ENQUEUED_AT_HEADER",
    "EVALUATE_TASK",
    "LANE_EXCHANGE",
    "LANE_QUEUES",
    "MAX_ATTEMPTS",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_ITEMS",
    "MAX_ITEM_BYTES",
    "OUTCOME_TASK",
    "PROVENANCE_FIELDS",
    "REEVALUATE_TASK",
    "SCHEMA_VERSION",
    "TALLY_TASK",
    "TASK_LANES",
    "TASK_NAMES",
    "Event",
    "EventType",
    "GoldLabel",
    "Lane",
    "OtelRef",
    "OutcomeEvent",
    "Reevaluation",
    "Sampling",
    "SamplingTally",
    "SliceMeta",
    "Snapshot",
    "TallyCounts",
    "TallyRow",
    "ToolRound",
    "ToolSpec",
    "Unit",
    "UnitRef",
    "Window",
    "WindowRule",
    "WindowViolation",
    "content_id",
]

SCHEMA_VERSION: Final = 1

PROVENANCE_FIELDS: Final = frozenset({"sampling", "source", "otel"})
"""Top-level snapshot fields that say how a unit was sent or read, not what is evaluated.

:func:`content_id` leaves them out, so the same unit sent live and under any number of backfill
ids (or read by another importer into the same events) is one snapshot, evaluated once.
Everything else — trace and session ids, unit, window, events, tools (the catalog), tool rounds,
evidence fields, labels, slice, issues, metric set and redaction — is part of the id.
"""


def content_id(wire: Mapping[str, Any], *, validated: bool = False) -> str:
    """The snapshot id of a wire dict: sha256 hex of the canonical JSON of its evaluated fields.

    The one definition of the id, shared by :attr:`Snapshot.snapshot_id` and the store (which
    re-hashes what it reads back). :data:`PROVENANCE_FIELDS` are left out. ``validated``: the
    wire of a validated :class:`Snapshot` (frozen JSON and finite numbers), whose canonical
    text orjson writes (``frozen_json``: the same text; this pass was ~2% of a backfill
    worker's GIL time through the standard library's encoder).
    """
    evaluated = {k: v for k, v in wire.items() if k not in PROVENANCE_FIELDS}
    text = frozen_json(evaluated) if validated else canonical_json(evaluated)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class WindowViolation(ValueError):
    """The snapshot holds evidence after its own cutoff (reason code ``WINDOW_VIOLATION``)."""

    code = "WINDOW_VIOLATION"


def _readonly(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _dump_mapping(value: Mapping[str, Any], handler: SerializerFunctionWrapHandler) -> Any:
    return handler(dict(value))


ReadOnlyMap = (AfterValidator(_readonly), WrapSerializer(_dump_mapping))


MAX_ITEM_BYTES: Final = 4 * 1024 * 1024
"""Largest snapshot or outcome (compact JSON, UTF-8) a worker accepts (else PAYLOAD_TOO_LARGE).

A contract constant: producers refuse larger items (naming file and line) instead of sending
what a worker would dead-letter, and workers read their limit from here.
"""
MAX_BATCH_ITEMS: Final = 64
"""Most snapshots in one backfill message; a worker accepts any batch up to this many items.

Producers split larger batches (``EVALQ_BATCH_SIZE`` is the wanted size, clamped to this), so
the batch sizes of producers and workers cannot mismatch into ``BATCH_TOO_LARGE`` dead letters.
"""
MAX_BATCH_BYTES: Final = 16 * 1024 * 1024
"""Most bytes of snapshot JSON in one backfill message: a batch is split before it would pass."""
MAX_ATTEMPTS: Final = 10
"""Most attempts of one snapshot under one metric-set version (the first and 9 retries): a
:class:`Reevaluation` names at most this one, and ``[retry] max_attempts`` is bounded by it."""


class Unit(StrEnum):
    """What one evaluation judges."""

    INVOCATION = "invocation"
    SESSION = "session"
    TOOL_CALL = "tool_call"


class WindowRule(StrEnum):
    """How the cutoff was chosen."""

    INVOCATION_END = "invocation_end"  # through the invocation's final answer
    SESSION_END = "session_end"  # through the last event of the session
    BEFORE_TOOL_CALL = "before_tool_call"  # just before the judged call (its result cannot leak)
    THROUGH_EVENT = "through_event"  # an explicit cutoff event


class UnitRef(Contract):
    """The judged unit and the event that identifies it (user message or proposed call).

    For a ``tool_call`` unit the window ends just before the call, so the call itself is not
    evidence; ``call`` carries the proposed call (name and arguments only) so that call-level
    metrics know what they judge. Its result is never part of the snapshot.
    """

    kind: Unit = Unit.INVOCATION
    event_id: str | None = None
    call: Event | None = None


class Window(Contract):
    """Evidence window: only events up to and including ``cutoff_event_id`` are evidence."""

    rule: WindowRule
    cutoff_event_id: str
    cutoff_time: UtcTime | None = None


class GoldLabel(Contract):
    """A gold label for one metric (exactly one of ``passed``/``label``). Never sent to a judge."""

    passed: bool | None = None
    label: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> GoldLabel:
        if (self.passed is None) == (self.label is None):
            raise ValueError("a gold label sets exactly one of passed/label")
        return self


class SliceMeta(Contract):
    """Slicing metadata for reports."""

    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None


class Sampling(Contract):
    """How this snapshot was sampled: lane, rate in (0, 1], weight (1/rate), rule name.

    Provenance of one send, not part of :attr:`Snapshot.snapshot_id`: the store keeps each
    delivered send's sampling in its ``sends`` records.
    """

    lane: Lane = Lane.LIVE
    rate: float = 1.0
    weight: float = 1.0
    rule: str = "all"

    @model_validator(mode="after")
    def _range(self) -> Sampling:
        # Finite: an infinite weight would pass "> 0" and is not JSON (the canonical text).
        if not 0 < self.rate <= 1 or not 0 < self.weight < math.inf:
            raise ValueError("sampling rate must be in (0, 1] and weight positive and finite")
        return self


_HEX = frozenset("0123456789abcdef")


def _otel_id(value: str, size: int) -> str:
    if len(value) != size * 2 or not set(value) <= _HEX or set(value) == {"0"}:
        raise ValueError(f"expected {size * 2} lowercase hex digits, not all zero")
    return value


class OtelRef(Contract):
    """Where an OpenTelemetry-imported snapshot came from: its trace and the evaluated span.

    ``trace_id`` (32 lowercase hex digits) is the OTel trace id, ``span_id`` (16) the
    invocation's root span (the span without a parent; for a trace whose root never arrived, the
    one missing parent its top spans share). Provenance, not evidence: the worker only uses it to
    parent the ``gen_ai.evaluation.result`` events it emits (docs/otel-events.md).
    """

    trace_id: str
    span_id: str

    @field_validator("trace_id")
    @classmethod
    def _trace_id(cls, value: str) -> str:
        return _otel_id(value, 16)

    @field_validator("span_id")
    @classmethod
    def _span_id(cls, value: str) -> str:
        return _otel_id(value, 8)


def _is_none(value: object) -> bool:
    """``exclude_if`` of provenance added after the wire contract's first version (``otel``).

    Left out of the wire form while unset, so a worker that predates it still accepts every
    snapshot that does not use it. A field-level rule keeps serialization in pydantic's Rust
    core; the model-level wrap serializer it replaced built the whole dict in Python (14% of a
    bulk backfill's publish time, ``docs/concurrency.md``, "Ninth round").
    """
    return value is None


class Snapshot(Contract):
    """An immutable trace snapshot cut at an evidence-window cutoff."""

    schema_version: Literal[1] = SCHEMA_VERSION
    trace_id: str
    session_id: str | None = None
    unit: UnitRef = UnitRef()
    events: tuple[Event, ...]
    tools: tuple[ToolSpec, ...] | None = None
    tool_rounds: tuple[ToolRound, ...] | None = None
    window: Window
    contexts: tuple[FrozenJson, ...] | None = None
    claims: tuple[str, ...] | None = None
    expected_tool_calls: tuple[FrozenJson, ...] | None = None
    labels: Annotated[Mapping[str, GoldLabel], *ReadOnlyMap] = Field(
        default_factory=dict, validate_default=True
    )
    slice: SliceMeta = SliceMeta()
    sampling: Sampling = Sampling()
    issues: tuple[str, ...] = ()
    metric_set: str = "agent"
    redaction: str | None = None
    source: str | None = None
    otel: OtelRef | None = Field(default=None, exclude_if=_is_none)

    _id: str | None = PrivateAttr(default=None)

    @field_validator("trace_id")
    @classmethod
    def _trace_id(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("trace_id must be non-blank")
        return value

    @property
    def snapshot_id(self) -> str:
        """:func:`content_id` of the wire form: identical evaluated content, identical id.

        Provenance (``sampling``, ``source``, ``otel``: :data:`PROVENANCE_FIELDS`) does not
        change it.
        """
        if self._id is None:
            object.__setattr__(self, "_id", content_id(self.wire(), validated=True))
        return self._id  # type: ignore[return-value]

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> Snapshot:
        """Copy with changes; the cached id is dropped because the content may differ."""
        copied = super().model_copy(update=update, deep=deep)
        object.__setattr__(copied, "_id", None)
        if update:  # re-validate so an update cannot smuggle in an invalid field
            return type(self).model_validate(copied.wire())
        return copied

    def wire(self) -> dict[str, Any]:
        """Plain JSON-mode dict (what goes on the queue; less provenance, the content hash)."""
        return self.model_dump(mode="json")

    def check_window(self) -> None:
        """Raise :class:`WindowViolation` if any event lies after the cutoff."""
        ids = [e.id for e in self.events]
        if self.window.cutoff_event_id not in ids:
            raise WindowViolation("cutoff event is not among the snapshot's events")
        if ids[-1] != self.window.cutoff_event_id:
            raise WindowViolation("an event follows the cutoff event")
        cutoff = self.window.cutoff_time
        if cutoff is not None and any(e.timestamp and e.timestamp > cutoff for e in self.events):
            raise WindowViolation("an event is timestamped after the cutoff time")

    def trace(self) -> Trace:
        """Project the in-window events into an engine :class:`~worker.evaluation.Trace`.

        A ``session`` unit judges the session's first user request (``request``) and keeps
        its last one as ``last_request``; other units judge their last user request.
        """
        self.check_window()
        trace = project(
            self.trace_id,
            self.events,
            tools=self.tools,
            tool_rounds=self.tool_rounds,
            proposed_call=self.unit.call,
            evidence={k: v for k in _EVIDENCE if (v := getattr(self, k)) is not None},
            issues=self.issues,
        )
        return session_requests(trace) if self.unit.kind is Unit.SESSION else trace


_EVIDENCE = ("contexts", "claims", "expected_tool_calls")
"""Snapshot fields the trace carries beyond its messages (when set)."""


class OutcomeEvent(Contract):
    """A fact observed after evaluation (refund reversed, complaint). Never mutates records."""

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: NonBlank
    trace_id: NonBlank
    session_id: str | None = None
    unit_event_id: str | None = None
    name: NonBlank
    value: FrozenJson = None
    observed_at: UtcTime


class Reevaluation(Contract):
    """Evaluate ``snapshot`` again as attempt ``attempt`` of ``metric_set_version``.

    Sent as :data:`REEVALUATE_TASK` by ``evalq retry`` and the automatic retry policy when the
    newest attempt's results carry retryable reasons (a judge outage: ``BACKEND_ERROR``,
    ``TIMEOUT``). The worker records a new evaluation for that attempt, linked to the one it
    supersedes; a redelivery of the same attempt finds it recorded and writes nothing. A worker
    whose configuration gives another metric-set version evaluates the snapshot as the first
    attempt of its own version instead (retries never mix versions).
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    snapshot: Snapshot
    metric_set_version: NonBlank
    attempt: int = Field(ge=2, le=MAX_ATTEMPTS)


class TallyCounts(Contract):
    """Sampling counts of one (rule, rate, slice): the rules every tally row obeys, defined once.

    The store's tally records (``worker.store``) are these counts too, so a row the contract
    accepts is a row the store accepts: a non-blank rule, a rate in [0, 1], ``0 <= sampled <=
    seen``.
    """

    rule: str
    rate: float = Field(ge=0.0, le=1.0)
    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None
    seen: int = Field(ge=0)
    sampled: int = Field(ge=0)

    @field_validator("rule")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("rule must be non-blank")
        return value

    @model_validator(mode="after")
    def _sampled_within_seen(self) -> TallyCounts:
        if self.sampled > self.seen:
            raise ValueError("sampled cannot exceed seen")
        return self

    @property
    def sampled_out(self) -> int:
        """Units seen but not sampled (what a report must say was not evaluated)."""
        return self.seen - self.sampled


class TallyRow(TallyCounts):
    """Sampling counts for one (rule, rate, lane, slice) since the producer's previous tally."""

    lane: Lane


class SamplingTally(Contract):
    """A delta of sampling counts from one producer process, sent as :data:`TALLY_TASK`.

    Producers never write records; the worker stores each row once per ``tally_id`` (a unique
    id per drain), so an at-least-once redelivery adds nothing.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    tally_id: NonBlank
    producer: NonBlank
    started_at: UtcTime
    ended_at: UtcTime
    rows: tuple[TallyRow, ...]
