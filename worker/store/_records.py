"""The records the store writes and returns: frozen pydantic models, JSON contents frozen.

The store knows records, not Celery and not the engine: a task turns a snapshot, an engine report
or an outcome event into these models and hands them over.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NamedTuple, TypeAlias

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from worker._json import FrozenJson, canonical_json, thaw

__all__ = [
    "Checkpoint",
    "DeadLetter",
    "DeadLetterRecord",
    "EvaluationRecord",
    "MetricResultRecord",
    "OutcomeLink",
    "OutcomeRecord",
    "OutcomeWritten",
    "RequestUsage",
    "ResultRow",
    "SampledOutCount",
    "SnapshotMeta",
    "SnapshotRecord",
    "StatusName",
    "StoredEvaluation",
    "TallyRecord",
    "TallyRowRecord",
    "Written",
    "evaluation_id_for",
]

StatusName = Literal["DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR"]
"""The four metric statuses (the engine's ``Status`` values are accepted as they are)."""


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be non-blank")
    return value


UtcTime = Annotated[AwareDatetime, AfterValidator(_utc)]
Text = Annotated[str, AfterValidator(_non_blank)]
Code = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Written(NamedTuple):
    """Result of an insert-if-absent write: the record's id and whether this call created it."""

    id: str
    created: bool


class OutcomeWritten(NamedTuple):
    """Result of recording an outcome: created, and the evaluations this call linked it to."""

    created: bool
    linked: tuple[str, ...]


# --- snapshots -------------------------------------------------------------------------------


class _Wire(BaseModel):
    # Reads the few snapshot fields the store indexes; the full content is kept verbatim.
    model_config = ConfigDict(frozen=True, extra="ignore")


class _WireUnit(_Wire):
    kind: Text
    event_id: str | None = None


class _WireWindow(_Wire):
    rule: Text
    cutoff_event_id: Text
    cutoff_time: UtcTime | None = None


class _WireSlice(_Wire):
    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None


class _WireSampling(_Wire):
    lane: Text
    rate: float
    weight: float
    rule: str


class SnapshotMeta(_Wire):
    """The indexed columns of a snapshot, read from its wire JSON (``producer.snapshot``)."""

    schema_version: int
    trace_id: Text
    session_id: str | None = None
    unit: _WireUnit
    window: _WireWindow
    slice: _WireSlice
    sampling: _WireSampling
    metric_set: Text


class SnapshotRecord(_Record):
    """A snapshot's wire JSON. ``snapshot_id`` is the sha256 of its canonical JSON.

    Build it as ``SnapshotRecord(content=snapshot.wire())``: the id then equals
    ``snapshot.snapshot_id`` and the indexed columns cannot disagree with the content.
    """

    content: FrozenJson
    _meta: SnapshotMeta = PrivateAttr()
    _text: str = PrivateAttr()
    _id: str = PrivateAttr()

    @model_validator(mode="after")
    def _index(self) -> SnapshotRecord:
        # Parse the indexed fields and compute the canonical text and id once.
        if not isinstance(self.content, Mapping):
            raise ValueError("snapshot content must be a JSON object")  # noqa: TRY004 - pydantic
        self._meta = SnapshotMeta.model_validate(thaw(self.content))
        self._text = canonical_json(self.content)
        self._id = hashlib.sha256(self._text.encode("utf-8")).hexdigest()
        return self

    @property
    def snapshot_id(self) -> str:
        """sha256 hex of the canonical JSON."""
        return self._id

    @property
    def meta(self) -> SnapshotMeta:
        """The fields the store keeps in indexed columns."""
        return self._meta

    @property
    def canonical_text(self) -> str:
        """The canonical JSON text that is stored and hashed."""
        return self._text


# --- evaluations -----------------------------------------------------------------------------


class RequestUsage(_Record):
    """Usage of one judge request: the model that answered and its usage object (or None)."""

    model: str | None = None
    usage: FrozenJson = None


class MetricResultRecord(_Record):
    """One metric's result inside an evaluation. ``reason`` is a code, never exception text."""

    metric_id: Text
    metric_version: Text
    status: StatusName
    reason: Text
    score: float | None = None
    passed: bool | None = None
    label: str | None = None
    evidence: FrozenJson = Field(default_factory=dict, validate_default=True)
    judge_model: str | None = None
    question_ids: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _rules(self) -> MetricResultRecord:
        if self.score is not None and not (math.isfinite(self.score) and 0 <= self.score <= 1):
            raise ValueError("score must be a finite number in [0, 1] or None")
        if self.passed is not None and self.status != "DECIDED":
            raise ValueError("passed must be None unless status is DECIDED")
        if not isinstance(self.evidence, Mapping):
            raise ValueError("evidence must be a JSON object")  # noqa: TRY004 - pydantic
        return self


class SnapshotText(_Record):
    """What the store writes of a snapshot: id, indexed columns and canonical text.

    The worker's form of :class:`SnapshotRecord`: it never reads the content back, so the
    content is not parsed into frozen JSON (measured: that walk was ~8% of a busy worker's CPU).
    Build it with :meth:`from_wire`.
    """

    snapshot_id: str
    canonical_text: str
    meta: SnapshotMeta

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any], canonical_text: str | None = None) -> SnapshotText:
        """The stored form of ``Snapshot.wire()`` output: serialized once, hashed once.

        ``canonical_text``, when the caller already computed it, must be
        ``canonical_json(wire)``.
        """
        if not isinstance(wire, Mapping):
            raise ValueError("snapshot content must be a JSON object")  # noqa: TRY004 - as _index
        text = canonical_json(wire) if canonical_text is None else canonical_text
        return cls(
            snapshot_id=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            canonical_text=text,
            meta=SnapshotMeta.model_validate(wire),
        )


StoredSnapshot: TypeAlias = SnapshotRecord | SnapshotText
"""Anything the store can write as a snapshot (both carry id, indexed columns and text)."""


@functools.lru_cache(maxsize=4096)  # a batch asks for each id several times (skip, write, link)
def evaluation_id_for(snapshot_id: str, metric_set_version: str, run: str = "") -> str:
    """Deterministic evaluation id: sha256 of the uniqueness key (unit-separated).

    Every worker computes the same id for the same (snapshot, metric-set version, run), so
    duplicate deliveries converge on one record without a read first.
    """
    key = "\x1f".join(("evalq.evaluation.v1", snapshot_id, metric_set_version, run))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _sorted(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(values))


class EvaluationRecord(_Record):
    """One evaluation of one snapshot under one metric-set version (and optional re-run label).

    ``outcome_criteria`` names the outcome events the metric set waits for (e.g.
    ``refund_reversed``); each is stored as a pending outcome of this evaluation. They are kept
    sorted, so a record read back equals the record written.
    """

    snapshot_id: Sha256Hex
    metric_set: Text
    metric_set_version: Text
    run: str = ""
    judge_kind: Text
    judge_model: str | None = None
    synthetic: bool
    requests: int = Field(ge=0)
    usage: tuple[RequestUsage, ...] = ()
    elapsed_s: float = Field(ge=0, allow_inf_nan=False)
    lane: Text
    results: tuple[MetricResultRecord, ...]
    outcome_criteria: Annotated[tuple[Text, ...], AfterValidator(_sorted)] = ()

    @model_validator(mode="after")
    def _unique(self) -> EvaluationRecord:
        ids = [r.metric_id for r in self.results]
        if len(set(ids)) != len(ids):
            raise ValueError("each metric appears at most once in an evaluation")
        if len(set(self.outcome_criteria)) != len(self.outcome_criteria):
            raise ValueError("outcome criteria must be distinct")
        if self.judge_kind == "synthetic" and not self.synthetic:
            raise ValueError("a synthetic judge's evaluation must say synthetic=True")
        return self

    @property
    def evaluation_id(self) -> str:
        """See :func:`evaluation_id_for`."""
        return evaluation_id_for(self.snapshot_id, self.metric_set_version, self.run)


class StoredEvaluation(_Record):
    """An evaluation as recorded: the record plus what the store added."""

    evaluation_id: str
    trace_id: str
    window_rule: str
    cutoff_event_id: str
    cutoff_time: UtcTime | None
    previous_evaluation_id: str | None
    created_at: UtcTime
    record: EvaluationRecord


class ResultRow(_Record):
    """One metric result joined with its evaluation and snapshot slice (for reports)."""

    evaluation_id: str
    snapshot_id: str
    trace_id: str
    metric_set: str
    metric_set_version: str
    run: str
    judge_kind: str
    synthetic: bool
    lane: str
    created_at: UtcTime
    position: int
    metric_id: str
    metric_version: str
    status: StatusName
    reason: str
    score: float | None
    passed: bool | None
    label: str | None
    evidence: FrozenJson
    judge_model: str | None
    question_ids: tuple[str, ...]
    window_rule: str
    cutoff_event_id: str
    cutoff_time: UtcTime | None
    agent_version: str | None
    environment: str | None
    tool: str | None
    sampling_weight: float


# --- outcomes --------------------------------------------------------------------------------


class OutcomeRecord(_Record):
    """A fact observed after evaluation. ``unit_event_id`` narrows it to one unit of the trace."""

    event_id: Text
    trace_id: Text
    session_id: str | None = None
    unit_event_id: str | None = None
    name: Text
    value: FrozenJson = None
    observed_at: UtcTime


class OutcomeLink(_Record):
    """An outcome linked to an evaluation, with when it was received and linked."""

    outcome: OutcomeRecord
    received_at: UtcTime
    linked_at: UtcTime


# --- dead letters and backfill progress ------------------------------------------------------


def _to_bytes(value: object) -> object:
    # Lone surrogates (text decoded with errors="surrogateescape") must not stop a dead letter.
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value


class DeadLetterRecord(_Record):
    """A message that could not be decoded or validated. ``reason`` is an UPPER_SNAKE code."""

    reason: Code
    task: str | None = None
    lane: str | None = None
    payload: Annotated[bytes, BeforeValidator(_to_bytes)]


class DeadLetter(_Record):
    """A recorded dead letter; ``payload`` holds at most the first 64 KiB."""

    dead_letter_id: str
    received_at: UtcTime
    reason: str
    task: str | None
    lane: str | None
    payload: bytes
    payload_size: int
    payload_sha256: str
    truncated: bool


class Checkpoint(_Record):
    """One backfill progress checkpoint: how far ``source`` was read and how much was enqueued."""

    backfill_id: Text
    source: Text
    position: int = Field(ge=0)
    enqueued: int = Field(ge=0)
    recorded_at: UtcTime


# --- sampling tallies ------------------------------------------------------------------------


class _TallyCounts(_Record):
    rule: Text
    rate: float = Field(ge=0, le=1)
    lane: Text
    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None
    seen: int = Field(ge=0)
    sampled: int = Field(ge=0)

    @model_validator(mode="after")
    def _within(self) -> _TallyCounts:
        if self.sampled > self.seen:
            raise ValueError("sampled cannot exceed seen")
        return self

    @property
    def sampled_out(self) -> int:
        """Units seen but not sampled: what was not evaluated."""
        return self.seen - self.sampled


class TallyRowRecord(_TallyCounts):
    """One row of a producer's sampling tally: a (rule, rate, lane, slice) and its counts."""

    @property
    def key(self) -> str:
        """Canonical JSON of the grouping columns: unique within a tally."""
        fields = (self.rule, self.rate, self.lane, self.agent_version, self.environment, self.tool)
        return canonical_json(list(fields))


class TallyRecord(_Record):
    """A producer's sampling tally (``producer.snapshot.SamplingTally`` as the store keeps it).

    Counts since the producer's previous tally; ``tally_id`` is unique per drain, so a redelivered
    tally is stored once.
    """

    tally_id: Text
    producer: Text
    started_at: UtcTime
    ended_at: UtcTime
    rows: tuple[TallyRowRecord, ...]

    @model_validator(mode="after")
    def _distinct_rows(self) -> TallyRecord:
        keys = [row.key for row in self.rows]
        if len(set(keys)) != len(keys):
            raise ValueError("each (rule, rate, lane, slice) appears at most once in a tally")
        return self


class SampledOutCount(_TallyCounts):
    """Totals over stored tallies for one (rule, rate, lane, slice)."""
