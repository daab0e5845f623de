"""The records the store writes and returns: frozen pydantic models, JSON contents frozen.

The store knows records, not Celery and not the engine: a task turns a snapshot, an engine report
or an outcome event into these models and hands them over.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal, NamedTuple, TypeAlias, get_args

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

from producer.snapshot import TallyCounts, content_id
from worker._models import assemble
from worker.canonical_json import FrozenJson, canonical_json, thaw

__all__ = [
    "AskedQuestion",
    "Checkpoint",
    "DeadLetter",
    "DeadLetterRecord",
    "EvaluationRecord",
    "MetricResultRecord",
    "OutcomeLink",
    "OutcomeRecord",
    "OutcomeWritten",
    "PurgeSummary",
    "ResultAudit",
    "ResultRow",
    "SampledOutCount",
    "SendRecord",
    "SnapshotMeta",
    "SnapshotRecord",
    "StatusName",
    "StoredEvaluation",
    "TallyRecord",
    "TallyRowRecord",
    "UsageRecord",
    "Written",
    "evaluation_id_for",
    "text_sha256",
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


# The checks of the fast constructors below: exact types only, so that a value validation would
# coerce (an int for a float, a str subclass, a list for a tuple) goes through validation instead.


def _is_text(value: object) -> bool:
    return type(value) is str and bool(value.strip())


def _is_optional_str(value: object) -> bool:
    return value is None or type(value) is str


def _all_of(kind: type, values: object) -> bool:
    return type(values) is tuple and all(type(value) is kind for value in values)


def _distinct(values: tuple[Any, ...]) -> bool:
    return len(set(values)) == len(values)


class Written(NamedTuple):
    """Result of an insert-if-absent write: the record's id and whether this call created it."""

    id: str
    created: bool


class OutcomeWritten(NamedTuple):
    """Result of recording an outcome: created, and the evaluations this call linked it to.

    ``conflict``: not created because its event id is stored with other content (the stored
    outcome is kept unchanged; an identical resend is not a conflict).
    """

    created: bool
    linked: tuple[str, ...]
    conflict: bool = False


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
    source: str | None = None


class SnapshotRecord(_Record):
    """A snapshot's wire JSON. ``snapshot_id`` is its content id (``producer.snapshot.content_id``:
    the sha256 of the canonical JSON of its evaluated fields, provenance left out).

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
        self._id = content_id(self.content)
        return self

    @property
    def snapshot_id(self) -> str:
        """The content id (provenance fields left out)."""
        return self._id

    @property
    def legacy_id(self) -> str:
        """The id schema versions before 4 gave it: sha256 of the whole canonical text.

        Snapshots recorded then keep that id; reading one back accepts it.
        """
        return hashlib.sha256(self._text.encode("utf-8")).hexdigest()

    @property
    def meta(self) -> SnapshotMeta:
        """The fields the store keeps in indexed columns."""
        return self._meta

    @property
    def canonical_text(self) -> str:
        """The canonical JSON text that is stored and hashed."""
        return self._text


# --- evaluations -----------------------------------------------------------------------------


class UsageRecord(_Record):
    """Usage of one judge request: the model that answered and its usage object (or None)."""

    model: str | None = None
    usage: FrozenJson = None

    @classmethod
    def counted(cls, model: str | None, usage: Mapping[str, Any] | None) -> UsageRecord:
        """``UsageRecord(model=model, usage=usage)``; cheap for a name and a dict of int counts.

        A dict of exact ints freezes to a read-only copy of itself; anything else is validated.
        """
        if not _is_optional_str(model):
            return cls(model=model, usage=usage)
        if usage is None:
            return assemble(cls, {"model": model, "usage": None}, {"model", "usage"})
        if type(usage) is dict and all(type(k) is str and type(v) is int for k, v in usage.items()):
            frozen = MappingProxyType(dict(usage))
            return assemble(cls, {"model": model, "usage": frozen}, {"model", "usage"})
        return cls(model=model, usage=usage)


@functools.lru_cache(maxsize=4096)  # a metric's fixed questions repeat in every evaluation
def text_sha256(text: str) -> str:
    """sha256 hex of ``text`` encoded as UTF-8: the digest question texts are stored under."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AskedQuestion(_Record):
    """One question a metric put to the judge: its id, the exact text sent and that text's digest.

    ``question_id`` is the namespaced id the request used (``metric.qid``). ``text`` is the
    question's wire JSON exactly as the request carried it; a record read back holds ``None`` once
    a retention purge expired the text (the digest stays). Build it with :meth:`of`.
    """

    question_id: Text
    sha256: Sha256Hex
    text: str | None = None

    @model_validator(mode="after")
    def _digest_matches(self) -> AskedQuestion:
        if self.text is not None and text_sha256(self.text) != self.sha256:
            raise ValueError("sha256 must be the digest of the question's UTF-8 text")
        return self

    @classmethod
    def of(cls, question_id: str, text: str) -> AskedQuestion:
        """The question with its digest computed from ``text`` (one shared frozen instance per
        id and text: a metric's fixed questions repeat in every evaluation)."""
        if _is_text(question_id) and type(text) is str:
            return _asked_question(question_id, text)
        return cls(question_id=question_id, sha256=text_sha256(text), text=text)


_ASKED_FIELDS = frozenset({"question_id", "sha256", "text"})


@functools.lru_cache(maxsize=4096)
def _asked_question(question_id: str, text: str) -> AskedQuestion:
    # What validation builds from a non-blank id, a str text and that text's digest (measured:
    # validating the questions and audits of an evaluation was ~0.2 ms, 8% of a worker's CPU).
    values = {"question_id": question_id, "sha256": text_sha256(text), "text": text}
    return assemble(AskedQuestion, values, set(_ASKED_FIELDS))


class ResultAudit(_Record):
    """What a metric's judge request carried, so a record can be checked on its own.

    ``questions``: every question asked, with its exact text (stored once per distinct text).
    ``state_sha256``: sha256 hex of the UTF-8 state text the request sent; the state itself is
    content and stays only in ``snapshot_contents``. ``judge_model``: the resolved judge model,
    the one the judge's reply named (``judge_model_reported`` True) or, when no reply named one,
    the model the worker was configured to ask (False; None if it had none either).
    """

    questions: tuple[AskedQuestion, ...]
    state_sha256: Sha256Hex
    judge_model: str | None = None
    judge_model_reported: bool = False

    @model_validator(mode="after")
    def _distinct_ids(self) -> ResultAudit:
        ids = [q.question_id for q in self.questions]
        if len(set(ids)) != len(ids):
            raise ValueError("each question id appears at most once in a result's audit")
        if self.judge_model_reported and self.judge_model is None:
            raise ValueError("a reported judge model needs its name")
        return self

    @classmethod
    def checked(
        cls,
        *,
        questions: tuple[AskedQuestion, ...],
        state_sha256: str,
        judge_model: str | None,
        judge_model_reported: bool,
    ) -> ResultAudit:
        """``ResultAudit(...)``, cheaply when the parts have exact types and pass its rules."""
        values = {
            "questions": questions,
            "state_sha256": state_sha256,
            "judge_model": judge_model,
            "judge_model_reported": judge_model_reported,
        }
        if (
            _all_of(AskedQuestion, questions)
            and _distinct(tuple(q.question_id for q in questions))
            and type(state_sha256) is str
            and _SHA256_HEX.fullmatch(state_sha256) is not None
            and _is_optional_str(judge_model)
            and type(judge_model_reported) is bool
            and (judge_model is not None or not judge_model_reported)
        ):
            return assemble(cls, values, set(values))
        return cls(**values)


class MetricResultRecord(_Record):
    """One metric's result inside an evaluation. ``reason`` is a code, never exception text.

    ``audit`` (None for a metric the judge was never sent, and for records of schema 3 and
    earlier) holds the exact question texts, the state digest and the resolved judge model.
    """

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
    audit: ResultAudit | None = None

    @model_validator(mode="after")
    def _rules(self) -> MetricResultRecord:
        if self.score is not None and not (math.isfinite(self.score) and 0 <= self.score <= 1):
            raise ValueError("score must be a finite number in [0, 1] or None")
        if self.passed is not None and self.status != "DECIDED":
            raise ValueError("passed must be None unless status is DECIDED")
        if not isinstance(self.evidence, Mapping):
            raise ValueError("evidence must be a JSON object")  # noqa: TRY004 - pydantic
        return self

    @classmethod
    def checked(
        cls,
        *,
        metric_id: str,
        metric_version: str,
        status: str,
        reason: str,
        score: float | None,
        passed: bool | None,
        label: str | None,
        evidence: Any,
        judge_model: str | None,
        question_ids: tuple[str, ...],
        audit: ResultAudit | None = None,
    ) -> MetricResultRecord:
        """The validated record, cheaply when ``evidence`` is already frozen (an engine result's).

        Every other rule of the model is checked here on exact types; anything that does not pass
        them is validated as usual, so what validation refuses is still refused. The evidence is
        trusted to be frozen JSON when it is a read-only mapping: a ``MetricResult`` froze it
        (re-freezing it was ~2% of a busy worker's CPU).
        """
        if (
            type(evidence) is MappingProxyType
            and _result_texts_ok(metric_id, metric_version, status, reason)
            and _result_values_ok(status, score, passed, label)
            and (judge_model is None or type(judge_model) is str)
            and type(question_ids) is tuple
            and all(type(qid) is str for qid in question_ids)
            and (audit is None or type(audit) is ResultAudit)
        ):
            return assemble(
                cls,
                {
                    "metric_id": metric_id,
                    "metric_version": metric_version,
                    "status": status,
                    "reason": reason,
                    "score": score,
                    "passed": passed,
                    "label": label,
                    "evidence": evidence,
                    "judge_model": judge_model,
                    "question_ids": question_ids,
                    "audit": audit,
                },
                set(_RESULT_FIELDS) if audit is not None else set(_UNAUDITED_FIELDS),
            )
        # ``audit`` only when given: a record without one says so in its fields set, as ever.
        extra = {} if audit is None else {"audit": audit}
        return cls(
            metric_id=metric_id,
            metric_version=metric_version,
            status=status,
            reason=reason,
            score=score,
            passed=passed,
            label=label,
            evidence=evidence,
            judge_model=judge_model,
            question_ids=question_ids,
            **extra,
        )


_STATUS_NAMES = frozenset(get_args(StatusName))
_RESULT_FIELDS = tuple(MetricResultRecord.model_fields)
_UNAUDITED_FIELDS = tuple(name for name in _RESULT_FIELDS if name != "audit")


def _result_texts_ok(
    metric_id: object, metric_version: object, status: object, reason: object
) -> bool:
    # Inline checks, not _is_text calls: seven results a snapshot.
    return (
        type(metric_id) is str
        and bool(metric_id.strip())
        and type(metric_version) is str
        and bool(metric_version.strip())
        and type(status) is str
        and status in _STATUS_NAMES
        and type(reason) is str
        and bool(reason.strip())
    )


def _result_values_ok(status: object, score: object, passed: object, label: object) -> bool:
    return (
        (score is None or (type(score) is float and math.isfinite(score) and 0 <= score <= 1))
        and (passed is None or (type(passed) is bool and status == "DECIDED"))
        and (label is None or type(label) is str)
    )


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
        """The stored form of ``Snapshot.wire()`` output: serialized once for the stored text,
        and once without its provenance fields for the id (``content_id``).

        ``canonical_text``, when the caller already computed it, must be
        ``canonical_json(wire)``, and ``wire`` a validated snapshot's (the id is then written by
        orjson too: ``content_id(..., validated=True)``).
        """
        if not isinstance(wire, Mapping):
            raise ValueError("snapshot content must be a JSON object")  # noqa: TRY004 - as _index
        text = canonical_json(wire) if canonical_text is None else canonical_text
        return cls(
            snapshot_id=content_id(wire, validated=canonical_text is not None),
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
    usage: tuple[UsageRecord, ...] = ()
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

    @classmethod
    def checked(cls, **fields: Any) -> EvaluationRecord:
        """``EvaluationRecord(**fields)``, cheaply when its parts are records already.

        Every rule of the model is checked here on exact types, with ``results`` and ``usage``
        tuples of records built by their own rules (:meth:`MetricResultRecord.checked`,
        :meth:`UsageRecord.counted`: validation keeps record instances as they are); anything
        else is validated as usual, so what validation refuses is still refused (measured:
        validating was ~11 us of a worker's record).
        """
        values = _evaluation_values(fields)
        if values is None:
            return cls(**fields)
        return assemble(cls, values, set(fields))

    @property
    def evaluation_id(self) -> str:
        """See :func:`evaluation_id_for`."""
        return evaluation_id_for(self.snapshot_id, self.metric_set_version, self.run)


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_EVALUATION_DEFAULTS: dict[str, Any] = {  # all immutable: None, "" and ()
    name: field.default
    for name, field in EvaluationRecord.model_fields.items()
    if not field.is_required()
}
_EVALUATION_FIELDS = frozenset(EvaluationRecord.model_fields)
_EVALUATION_REQUIRED = _EVALUATION_FIELDS - _EVALUATION_DEFAULTS.keys()
# Every field in declaration order (a record's __dict__ keeps it: dumps follow it), defaults set;
# dict.update keeps the order of keys already present.
_EVALUATION_TEMPLATE: dict[str, Any] = {
    name: _EVALUATION_DEFAULTS.get(name) for name in EvaluationRecord.model_fields
}


def _evaluation_values(fields: dict[str, Any]) -> dict[str, Any] | None:
    """The field values of the record ``fields`` validate to, or None to let validation say."""
    if not _EVALUATION_REQUIRED <= fields.keys() <= _EVALUATION_FIELDS:
        return None
    values = _EVALUATION_TEMPLATE.copy()
    values.update(fields)
    if not (_evaluation_scalars_ok(values) and _evaluation_parts_ok(values)):
        return None
    values["outcome_criteria"] = tuple(sorted(values["outcome_criteria"]))
    return values


def _evaluation_scalars_ok(values: dict[str, Any]) -> bool:
    snapshot_id, requests, elapsed_s = (
        values["snapshot_id"],
        values["requests"],
        values["elapsed_s"],
    )
    return (
        type(snapshot_id) is str
        and _SHA256_HEX.fullmatch(snapshot_id) is not None
        and _is_text(values["metric_set"])
        and _is_text(values["metric_set_version"])
        and type(values["run"]) is str
        and _is_text(values["judge_kind"])
        and _is_optional_str(values["judge_model"])
        and type(values["synthetic"]) is bool
        and (values["synthetic"] or values["judge_kind"] != "synthetic")
        and type(requests) is int
        and requests >= 0
        and type(elapsed_s) is float
        and math.isfinite(elapsed_s)
        and elapsed_s >= 0
        and _is_text(values["lane"])
    )


def _evaluation_parts_ok(values: dict[str, Any]) -> bool:
    results, criteria = values["results"], values["outcome_criteria"]
    return (
        _all_of(UsageRecord, values["usage"])
        and _all_of(MetricResultRecord, results)
        and len({r.metric_id for r in results}) == len(results)
        and type(criteria) is tuple
        and all(_is_text(c) for c in criteria)
        and _distinct(criteria)
    )


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

    @property
    def payload_expired(self) -> bool:
        """True once a retention purge emptied the payload (size and sha256 are kept)."""
        return not self.payload and self.payload_size > 0


class PurgeSummary(_Record):
    """What one retention purge expired; every record (metadata, results) stays readable."""

    content_before: UtcTime
    requested_at: UtcTime
    contents_removed: int = Field(ge=0)
    """``snapshot_contents`` rows deleted (snapshots created before ``content_before``)."""
    payloads_cleared: int = Field(ge=0)
    """Dead letters received before ``content_before`` whose payload was emptied."""
    question_texts_removed: int = Field(default=0, ge=0)
    """Question texts deleted: no snapshot created at or after ``content_before`` asked them."""


class Checkpoint(_Record):
    """One backfill progress checkpoint: how far ``source`` was read and how much was enqueued."""

    backfill_id: Text
    source: Text
    position: int = Field(ge=0)
    enqueued: int = Field(ge=0)
    recorded_at: UtcTime


# --- sends ---------------------------------------------------------------------------------


class SendRecord(_Record):
    """One delivered send of a snapshot: its provenance, kept beside the content-addressed id.

    A snapshot is recorded once, whatever sent it; every message that delivered it (the live
    lane, each backfill id, a re-send) adds one send. ``message_id`` names the message (the
    broker message's task id; a hash of its body when it has none), so a redelivered message
    — the same id — adds nothing (:attr:`send_key`). A snapshot appearing twice in one message
    is one send.
    """

    snapshot_id: Text
    message_id: Text
    lane: Text
    rate: float
    weight: float
    rule: str
    source: str | None = None

    @property
    def send_key(self) -> str:
        """The deduplication key: sha256 of (message id, snapshot id), unit-separated."""
        key = "\x1f".join(("evalq.send.v1", self.message_id, self.snapshot_id))
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    @classmethod
    def of(
        cls, snapshot_id: str, meta: SnapshotMeta, message_id: str, lane: str | None = None
    ) -> SendRecord:
        """The send of a snapshot's own sampling facts in message ``message_id``; ``lane`` is
        the lane it arrived on when known (else the one its sampling names)."""
        sampling = meta.sampling
        return cls(
            snapshot_id=snapshot_id,
            message_id=message_id,
            lane=lane or sampling.lane,
            rate=sampling.rate,
            weight=sampling.weight,
            rule=sampling.rule,
            source=meta.source,
        )


# --- sampling tallies ------------------------------------------------------------------------


class _TallyCounts(TallyCounts):
    """The contract's counting rules; the lane is kept as text (the store knows no lane enum)."""

    lane: Text


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
