"""The message path, without Celery: decode → accept → skip-if-done → evaluate → records → write.

:class:`Handler` takes :class:`Delivery` values (what the consumer read off a broker message) and
answers each with a :class:`Verdict` once the message may leave the broker: ``ACK`` when its
records (or its dead letters) are committed, ``REQUEUE`` when the store could not take them or
a warm shutdown came before one of its evaluations started (those that did start are written
first; the redelivery skips them). It
runs on the runtime's event loop; blocking store calls go to the runtime's store threads.

Several deliveries handed over together (a micro-batch: what one broker fetch returned) share
their per-message work: one skip-if-done query for all their snapshots. They are accepted
(decoded, validated, projected) :data:`ACCEPT_SLICE` items (accepted or refused) per loop
callback, so a batch of backfill messages never holds the loop for long. Each evaluation then runs
on its own, under the runtime's concurrency slots and its own budget, and its record joins the
group commit (:class:`~worker.committer.Committer`): records of evaluations that finish close
together are written in one transaction, and a delivery's verdict comes only after the
transaction holding the last of its records has committed.

What happens to an item (one snapshot; a backfill message holds several):

- It does not decode or validate → a dead-letter record with a reason code
  (:class:`~worker.dead_letters.DeadLetterCode`) and its raw item; its siblings go on.
- Every accepted item records a *send* (its lane, sampling and rule: provenance kept beside the
  content-addressed snapshot), keyed by (message id, snapshot id), so a redelivered message adds
  none and a unit sent live and under two backfill ids has three. Written in one transaction per
  message, alongside the evaluation, and also when the evaluation already exists. A retry item
  records none: it re-evaluates a unit that was sent, it is not a send.
- Its snapshot already has an evaluation for this metric-set version → no evaluation is written.
- A retry (``evalq.reevaluate``: a snapshot and the attempt N it is to be) is the same, for
  attempt N: its evaluation id is ``(snapshot, version, "attempt:N")``'s, so skip-if-done looks
  for that attempt and a redelivered retry writes nothing new; the new record links to the
  attempt it supersedes. A retry for another metric-set version than this worker's is evaluated
  as the first attempt of this worker's version.
- Otherwise the engine evaluates it and the store records it (idempotently: a duplicate delivery
  racing this one writes nothing new). Records of the synthetic judge say ``synthetic``. Once a
  record has committed (and only when this delivery created it), its metric results go to the
  event sink, if any, as ``gen_ai.evaluation.result`` events (:mod:`worker.otel_events`).
- An unexpected error (a bug, not a refusal) while accepting a message, or in its
  micro-batch's skip-if-done step → the whole message is an ``INTERNAL_ERROR`` dead letter with
  its raw bytes (:meth:`Handler._give_up`), never a message left without a verdict.
- Its evaluation fails with a bug → an ``INTERNAL_ERROR`` dead letter of its snapshot; the store
  refuses its record for good (``PermanentStoreError``: a permission, a constraint) →
  a ``RECORD_REFUSED`` dead letter of its snapshot; a bug while writing it → ``INTERNAL_ERROR``.
  Each is kept for ``evalq redrive`` and the message is acked: requeued instead, it would be
  evaluated again, the judge paid again, and refused again, for ever. Only store trouble that
  passes (a ``TransientStoreError``, a halt, a shutdown) sends the message back to the broker.
- An outcome event whose ``event_id`` is already stored with other content → the stored one is
  kept, the new one becomes an ``OUTCOME_CONFLICT`` dead letter; an identical resend is a no-op.
  An outcome or a sampling tally the store refuses for good → a ``RECORD_REFUSED`` (a bug:
  ``INTERNAL_ERROR``) dead letter of its message's raw bytes, acked.
- A dead letter the store refuses for good (or a bug writing it) → the process halts
  (:mod:`worker.halt`: one line with the store's code, exit 75) and the message goes back to
  the broker: the dead letter is the last resort, and a store that refuses it would see every
  message it cannot keep fetched and refused again for ever.

Logs carry reason codes and snapshot ids, never exception text, keys or content.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from producer.snapshot import (
    EVALUATE_TASK,
    MAX_BATCH_ITEMS,
    MAX_ITEM_BYTES,
    OUTCOME_TASK,
    REEVALUATE_TASK,
    SCHEMA_VERSION,
    TALLY_TASK,
    Lane,
    OutcomeEvent,
    Reevaluation,
    SamplingTally,
    Snapshot,
    WindowViolation,
)
from producer.topology import trace_label
from worker import metrics
from worker.canonical_json import compact_json, frozen_json
from worker.committer import Committer
from worker.dead_letters import DeadLetterCode, raw_bytes, record_dead_letter
from worker.evaluation import Entry, Reason, Report, RequestUsage, Status, Trace
from worker.judges import Usage
from worker.metric_sets import MetricSet, UnknownMetricSetError, set_for_unit
from worker.otel_events import EventSink, result_events
from worker.runtime import FinishedEvaluation, Runtime
from worker.slots import SlotsClosedError
from worker.store import (
    AskedQuestion,
    EvaluationRecord,
    MetricResultRecord,
    OutcomeRecord,
    PermanentStoreError,
    ResultAudit,
    SendRecord,
    SnapshotText,
    StoreCode,
    StoreError,
    TallyRecord,
    TransientStoreError,
    UsageRecord,
    attempt_run,
    evaluation_id_for,
)

__all__ = [
    "ACCEPT_SLICE",
    "Delivery",
    "Handler",
    "RefusedError",
    "Verdict",
    "decode_outcome",
    "decode_reevaluation",
    "decode_snapshot",
    "decode_tally",
]

_log = logging.getLogger(__name__)
ACCEPT_SLICE = 16
"""Items (snapshots, accepted or refused) per loop callback. The consumer hands over 16
messages at a time, and 16 backfill messages of 8 snapshots took one 10-54 ms callback to
accept, during which every judge reply and slot hand-over of the process waited (measured with a
timing wrapper around the loop's callbacks, backfill at C = 64, L = 100 ms). Sliced at 16
snapshots the longest callback read 15 ms, and the drain was as fast or faster (up to 8.7%) in
seven of nine alternating pairs, +2.3% on average (docs/concurrency.md, "Twenty-fifth round").
The first slice is accepted at once, as the whole micro-batch was before: a live message waits
for no extra loop turn."""
_JUDGED_REASONS = frozenset(
    {Reason.INVALID_RESPONSE, Reason.BACKEND_ERROR, Reason.REDUCE_ERROR, Reason.TIMEOUT}
)
_NO_ANSWER_REASONS = frozenset({Reason.BACKEND_ERROR, Reason.TIMEOUT})


class Verdict(enum.Enum):
    """What the consumer does with a handled message."""

    ACK = "ack"  # its records or dead letters are committed
    REQUEUE = "requeue"  # not all recorded (store trouble, shutdown): back to the broker


class RefusedError(Exception):
    """An item or message that cannot be evaluated; becomes a dead letter with ``code``."""

    def __init__(self, code: DeadLetterCode) -> None:
        super().__init__(code.value)
        self.code = code


@dataclass(frozen=True)
class Delivery:
    """One broker message as the handler needs it (built by the consumer, Celery-free).

    ``args``/``kwargs`` are the task's arguments (``None`` when the consumer already refused the
    message: then ``refused`` holds the code). ``raw`` is the message body as it came, kept by a
    dead letter. ``enqueued_at`` is the producer's publish stamp (unix seconds), if any.
    ``message_id`` is the broker message's task id (the same on a redelivery); without one, a
    hash of ``raw`` names the message (:attr:`send_id`).
    """

    task: str | None
    args: tuple[Any, ...] | None
    kwargs: Mapping[str, Any]
    lane: Lane | None
    raw: bytes
    enqueued_at: float | None = None
    refused: DeadLetterCode | None = None
    message_id: str | None = None

    @property
    def send_id(self) -> str:
        """What names this message in its sends: the task id, else ``body:`` + sha256(raw)."""
        if self.message_id is not None:
            return self.message_id
        return "body:" + hashlib.sha256(self.raw).hexdigest()

    @classmethod
    def refusal(
        cls, code: DeadLetterCode, raw: bytes, task: str | None = None, lane: Lane | None = None
    ) -> Delivery:
        """A message the consumer could not read: the handler only dead-letters it."""
        return cls(task=task, args=None, kwargs={}, lane=lane, raw=raw, refused=code)


# --- decoding ----------------------------------------------------------------------------------


def _one_argument(delivery: Delivery) -> Any:
    args = delivery.args or ()
    if len(args) != 1 or delivery.kwargs:
        raise RefusedError(DeadLetterCode.BAD_ARGUMENTS)
    return args[0]


def _check_size(item: Any) -> None:
    try:  # unsorted: the same length as the canonical text, without the sorting
        text = compact_json(item)
    except (ValueError, RecursionError):
        raise RefusedError(DeadLetterCode.SCHEMA_INVALID) from None
    _check_text_size(text)


def _check_text_size(text: str) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: Python text, not JSON text
        raise RefusedError(DeadLetterCode.SCHEMA_INVALID) from None
    if size > MAX_ITEM_BYTES:
        raise RefusedError(DeadLetterCode.PAYLOAD_TOO_LARGE)


def _schema_code(item: Any) -> DeadLetterCode:
    version = item.get("schema_version") if isinstance(item, Mapping) else None
    if version is not None and version != SCHEMA_VERSION:
        return DeadLetterCode.UNSUPPORTED_SCHEMA_VERSION
    return DeadLetterCode.SCHEMA_INVALID


@dataclass(frozen=True)
class _Decoded:
    """A valid snapshot, its wire form and its canonical text (computed once)."""

    snapshot: Snapshot
    wire: dict[str, Any]
    canonical_text: str


def _decoded(item: Any) -> _Decoded:
    """Validate, then measure the canonical text the store writes anyway.

    The size limit is read off that text instead of serializing every item once more only to
    measure it (measured: ~10% of the decoding CPU). An invalid item is measured first: an
    oversized one is ``PAYLOAD_TOO_LARGE``. Nesting too deep for pydantic or JSON is
    ``SCHEMA_INVALID`` for that item alone.
    """
    try:
        snapshot = Snapshot.model_validate(item)
    except (ValidationError, RecursionError):
        _check_size(item)
        raise RefusedError(_schema_code(item)) from None
    try:
        wire = snapshot.wire()
        # The wire of a valid snapshot is frozen JSON plus validated, finite fields.
        text = frozen_json(wire)
    except (UnicodeEncodeError, ValueError, RecursionError):  # lone surrogate key, too deep
        raise RefusedError(DeadLetterCode.SCHEMA_INVALID) from None
    _check_text_size(text)
    return _Decoded(snapshot, wire, text)


def decode_snapshot(item: Any) -> Snapshot:
    """Validate one queued item as a :class:`Snapshot` (``RefusedError`` with a code otherwise)."""
    return _decoded(item).snapshot


def decode_outcome(item: Any) -> OutcomeEvent:
    """Validate one queued item as an :class:`OutcomeEvent`."""
    _check_size(item)
    try:
        return OutcomeEvent.model_validate(item)
    except (ValidationError, RecursionError):
        raise RefusedError(_schema_code(item)) from None


def decode_tally(item: Any) -> SamplingTally:
    """Validate one queued item as a :class:`SamplingTally`."""
    _check_size(item)
    try:
        return SamplingTally.model_validate(item)
    except (ValidationError, RecursionError):
        raise RefusedError(_schema_code(item)) from None


def decode_reevaluation(item: Any) -> Reevaluation:
    """Validate one queued retry item as a :class:`Reevaluation` (``RefusedError`` otherwise)."""
    try:
        return Reevaluation.model_validate(item)
    except (ValidationError, RecursionError):
        _check_size(item)
        raise RefusedError(_schema_code(item)) from None


def _project(snapshot: Snapshot) -> Trace:
    try:
        return snapshot.trace()
    except WindowViolation:
        raise RefusedError(DeadLetterCode.WINDOW_VIOLATION) from None
    except (ValueError, RecursionError):
        raise RefusedError(DeadLetterCode.TRACE_INVALID) from None


# --- records -----------------------------------------------------------------------------------


def _question_ids(metric: Any, trace: Trace, entry: Entry) -> tuple[str, ...]:
    status, reason = entry.result.status, entry.result.reason
    judged = status in (Status.DECIDED, Status.INCONCLUSIVE) or reason in _JUDGED_REASONS
    if not judged:
        return ()
    if entry.asked:  # what the engine planned: questions are deterministic by contract
        return tuple(f"{metric.id}.{qid}" for qid in entry.asked)
    try:  # a result the engine decided without planning questions: recompute them
        return tuple(f"{metric.id}.{qid}" for qid in metric.questions(trace))
    except Exception:  # noqa: BLE001 - a metric that failed planning asked nothing
        return ()


def _answering_model(report: Report, configured: str | None) -> str | None:
    models = {u.model for u in report.usage if u.model}
    return models.pop() if len(models) == 1 else configured


def _audit(entry: Entry, configured: str | None) -> ResultAudit | None:
    """What the metric's judge request carried, with the resolved judge model.

    The resolved model is the one the judge's reply named for that request (a backend may
    answer with another model than asked: an alias, a fallback); when no reply named one (it
    timed out, failed, or the judge does not say), the model this worker was configured to ask,
    marked as not reported. None for a metric whose questions were never sent.
    """
    sent = entry.sent
    if sent is None:
        return None
    questions = tuple(
        AskedQuestion.of(f"{entry.id}.{qid}", text)
        for qid, text in zip(entry.asked, sent.questions, strict=True)
    )
    return ResultAudit.checked(
        questions=questions,
        state_sha256=sent.state_sha256,
        judge_model=sent.model or configured,
        judge_model_reported=sent.model is not None,
    )


def _results(
    report: Report,
    metric_set: MetricSet,
    trace: Trace,
    model: str | None,
    configured: str | None = None,
) -> tuple[MetricResultRecord, ...]:
    by_id = {m.id: m for m in metric_set.metrics}
    rows = []
    for entry in report.results:
        result = entry.result
        qids = _question_ids(by_id[entry.id], trace, entry)
        answered = bool(qids) and result.reason not in _NO_ANSWER_REASONS
        audit = _audit(entry, configured)
        # Built without re-validation: every field comes from the engine's validated
        # MetricResult and the evaluator's checked ids and versions, and ``checked`` applies the
        # record's own rules to them (re-validating the evidence was ~2% of a busy worker's CPU).
        rows.append(
            MetricResultRecord.checked(
                metric_id=entry.id,
                metric_version=entry.version,
                status=result.status.value,
                reason=result.reason,
                score=result.score,
                passed=result.passed,
                label=result.label,
                evidence=result.evidence,
                judge_model=_answered_by(audit, model) if answered else None,
                question_ids=qids,
                audit=audit,
            )
        )
    return tuple(rows)


def _answered_by(audit: ResultAudit | None, model: str | None) -> str | None:
    """The result's judge model: its own request's reported model, else the evaluation's."""
    if audit is not None and audit.judge_model_reported:
        return audit.judge_model
    return model


def _usage_record(entry: RequestUsage) -> UsageRecord:
    """The stored form of one response's usage: its model and its usage object as JSON."""
    usage = entry.usage
    if usage is None:
        return UsageRecord.counted(entry.model, None)
    # Usage's own fields, read directly: exact ints dump to JSON as themselves, and model_dump
    # cost ~2 us a response.
    counts = dict(usage.__dict__)
    if type(usage) is not Usage or not all(type(count) is int for count in counts.values()):
        counts = usage.model_dump(mode="json")
    return UsageRecord.counted(entry.model, counts)


@dataclass(frozen=True)
class _Job:
    """One accepted snapshot: its content record, projection and metric set."""

    snapshot: Snapshot
    content: SnapshotText
    trace: Trace
    metric_set: MetricSet
    lane: Lane
    run: str = ""  # the attempt ("" = 1, "attempt:N" for a retry)

    @property
    def snapshot_id(self) -> str:
        """The content id (computed once, from the canonical text)."""
        return self.content.snapshot_id

    @property
    def trace_label(self) -> str:
        """The trace id as logs show it (bounded, no control characters: it is user text)."""
        return trace_label(self.snapshot.trace_id)

    @property
    def evaluation_id(self) -> str:
        """The id its evaluation record gets (snapshot x metric-set version x attempt)."""
        return evaluation_id_for(self.snapshot_id, self.metric_set.version, self.run)


def _evaluation_record(rt: Runtime, job: _Job, finished: FinishedEvaluation) -> EvaluationRecord:
    settings, report = rt.settings, finished.report
    model = _answering_model(report, rt.judge_model)
    # elapsed_s runs from the evaluation's start (its budget's start) to the hand-over of the
    # record, so the stored value bounds "recorded within budget + margin" honestly.
    return EvaluationRecord.checked(
        snapshot_id=job.snapshot_id,
        metric_set=job.metric_set.name,
        metric_set_version=job.metric_set.version,
        run=job.run,
        judge_kind=settings.judge.value,
        judge_model=model,
        synthetic=settings.judge.value == "synthetic",
        requests=report.requests,
        usage=tuple(_usage_record(u) for u in report.usage),
        elapsed_s=time.monotonic() - finished.started_s,
        lane=job.lane.value,
        results=_results(report, job.metric_set, job.trace, model, rt.judge_model),
        outcome_criteria=settings.outcome_criteria,
    )


# --- the handler -------------------------------------------------------------------------------


@dataclass
class _Message:
    """A delivery being handled: its accepted jobs and the writes its verdict waits for."""

    delivery: Delivery
    verdict: asyncio.Future[Verdict]
    jobs: list[_Job] = field(default_factory=list)
    writes: list[asyncio.Future[Any]] = field(default_factory=list)
    sends: tuple[SendRecord, ...] = ()  # written with its first evaluation, or alone
    watched: bool = False  # its verdict follows its writes (_settle_when_written was called)

    def take_sends(self) -> tuple[SendRecord, ...]:
        """The sends not yet handed to the committer (each message hands them over once)."""
        sends, self.sends = self.sends, ()
        return sends


class Handler:
    """The message path of one worker process, on its runtime's loop (see the module)."""

    def __init__(
        self, rt: Runtime, committer: Committer | None = None, events: EventSink | None = None
    ) -> None:
        self.rt = rt
        self.committer = committer or Committer(rt)
        self.events = events  # gets each committed record's results (EVALQ_OTLP_ENDPOINT)
        # evaluation id -> the evaluation under way: a duplicate delivery that arrives while
        # the first is being evaluated waits for it instead of asking the judge again.
        self._under_way: dict[str, asyncio.Future[Any]] = {}

    async def handle(self, deliveries: Sequence[Delivery]) -> list[Verdict]:
        """Handle ``deliveries`` together and wait for every verdict (tests, simple callers)."""
        return list(await asyncio.gather(*self.submit(deliveries)))

    def submit(self, deliveries: Sequence[Delivery]) -> list[asyncio.Future[Verdict]]:
        """Start handling ``deliveries`` as one micro-batch; a future per delivery, in order.

        Called on the loop. Each future is done when that message may leave the broker.
        """
        loop = self.rt.loop
        messages = [_Message(d, loop.create_future()) for d in deliveries]
        first = self._accept_slice(messages, 0)  # a live message is accepted here, at once
        task = loop.create_task(self._accept_rest_then_evaluate(messages, first))
        task.add_done_callback(_report_crash)
        return [m.verdict for m in messages]

    async def _accept_rest_then_evaluate(self, messages: list[_Message], start: int) -> None:
        """Accept the rest of the micro-batch a slice per loop callback, then evaluate it.

        Accepting (decoding, validating, projecting) is CPU work on the loop; the loop runs its
        other callbacks (judge replies, slot hand-overs, commits) between slices, while the
        whole micro-batch still shares one skip-if-done query.
        """
        try:
            while start < len(messages):
                await asyncio.sleep(0)  # let the loop run what is ready
                start = self._accept_slice(messages, start)
            await self._evaluate_all([m for m in messages if m.jobs])
        except Exception as exc:  # noqa: BLE001 - a bug must not leave messages without verdicts
            _log.error("handler failed (%s)", type(exc).__name__)
            for message in messages:
                if not message.watched:
                    self._give_up(message, exc)
                    self._settle_when_written(message)

    def _accept_slice(self, messages: list[_Message], start: int) -> int:
        """Accept messages from ``start`` until ``ACCEPT_SLICE`` items are (evaluations and
        refusals alike); the next index."""
        accepted = 0
        while start < len(messages) and accepted < ACCEPT_SLICE:
            message = messages[start]
            self._accept(message)
            # Refused items (dead letters) cost their decode too: counted with the jobs.
            accepted += max(1, len(message.jobs) + len(message.writes))
            if not message.jobs:
                self._settle_when_written(message)
            start += 1
        return start

    def _give_up(self, message: _Message, exc: Exception) -> None:
        """An unexpected error (a bug, not a refusal) while handling ``message``: the whole
        message becomes an ``INTERNAL_ERROR`` dead letter with its raw bytes (kept for redrive),
        rather than staying without a verdict — held, its lease renewed, until a restart.

        Evaluations of it already under way still finish and are recorded (a redrive then
        finds them done); if even the dead letter cannot be scheduled, the message is requeued.
        The caller settles the message once its writes are done, as for any other.
        """
        _log.error(
            "message dead-lettered: %s (%s)", DeadLetterCode.INTERNAL_ERROR, type(exc).__name__
        )
        message.jobs.clear()
        message.sends = ()
        try:
            self._dead_letter(message, DeadLetterCode.INTERNAL_ERROR, message.delivery.raw)
        except Exception:  # noqa: BLE001 - the last resort: the broker keeps it
            _settle(message.verdict, Verdict.REQUEUE)

    # -- accepting ------------------------------------------------------------------------------

    def _accept(self, message: _Message) -> None:
        """Route by task name; refusals become dead-letter writes, evaluations become jobs."""
        delivery = message.delivery
        try:
            if delivery.refused is not None:
                self._dead_letter(message, delivery.refused, delivery.raw)
            elif delivery.task == EVALUATE_TASK:
                self._accept_items(message, _items(_one_argument(delivery)))
            elif delivery.task == REEVALUATE_TASK:
                self._accept_items(message, _items(_one_argument(delivery)), retry=True)
            elif delivery.task == OUTCOME_TASK:
                record = _outcome_record(decode_outcome(_one_argument(delivery)))
                _write_later(message, self._write_or_keep(message, self._record_outcome, record))
            elif delivery.task == TALLY_TASK:
                tally = _tally_record(decode_tally(_one_argument(delivery)))
                _write_later(message, self._write_or_keep(message, self._record_tally, tally))
            else:
                raise RefusedError(DeadLetterCode.UNKNOWN_TASK)  # noqa: TRY301 - one path
        except RefusedError as refused:
            self._dead_letter(message, refused.code, delivery.raw)
        except Exception as exc:  # noqa: BLE001 - a bug must not stall the micro-batch
            self._give_up(message, exc)

    def _accept_items(self, message: _Message, items: list[Any], *, retry: bool = False) -> None:
        lane = message.delivery.lane
        for item in items:
            try:
                job = self._retry_job(item, lane) if retry else self._job(item, lane)
                message.jobs.append(job)
            except RefusedError as refused:
                self._dead_letter(message, refused.code, raw_bytes(item))
            except Exception as exc:  # noqa: BLE001 - one bad item must not take its batch down
                _log.error(
                    "item refused: %s (%s)", DeadLetterCode.INTERNAL_ERROR, type(exc).__name__
                )
                self._dead_letter(message, DeadLetterCode.INTERNAL_ERROR, raw_bytes(item))
        # A retry re-evaluates a unit already sent; it is no send of its own (reports would
        # count it as a duplicate send).
        if message.jobs and not retry:
            send_id = message.delivery.send_id
            message.sends = tuple(
                SendRecord.of(j.snapshot_id, j.content.meta, send_id, j.lane.value)
                for j in message.jobs
            )

    def _job(self, item: Any, lane: Lane | None) -> _Job:
        """Decode, check the window and resolve the metric set (``RefusedError`` with a code)."""
        decoded = _decoded(item)
        trace = _project(decoded.snapshot)
        try:
            snapshot = decoded.snapshot
            name = set_for_unit(snapshot.metric_set, snapshot.unit.kind.value)
            metric_set, _ = self.rt.metric_set(name)
        except UnknownMetricSetError:
            raise RefusedError(DeadLetterCode.UNKNOWN_METRIC_SET) from None
        content = SnapshotText.from_wire(decoded.wire, decoded.canonical_text)
        return _Job(
            decoded.snapshot, content, trace, metric_set, lane or decoded.snapshot.sampling.lane
        )

    def _retry_job(self, item: Any, lane: Lane | None) -> _Job:
        """A retry item's job: its snapshot's, as the attempt it names (for its own version)."""
        retry = decode_reevaluation(item)
        job = self._job(item["snapshot"], lane)
        if job.metric_set.version != retry.metric_set_version:
            _log.info(
                "retry for another metric-set version: %s evaluated as attempt 1 of %s",
                job.snapshot_id[:16],
                job.metric_set.version,
            )
            return job
        return dataclasses.replace(job, run=attempt_run(retry.attempt))

    # -- evaluating -----------------------------------------------------------------------------

    async def _evaluate_all(self, messages: list[_Message]) -> None:
        """Skip-if-done for the whole micro-batch in one query, then evaluate the rest."""
        if not messages:
            return
        started_s = time.monotonic()
        try:
            done = await self._existing([j.evaluation_id for m in messages for j in m.jobs])
        except StoreError as exc:
            _log.error("store unavailable: %s; messages requeued", exc.code)
            self.committer.read_failed(exc, started_s)
            for message in messages:
                _settle(message.verdict, Verdict.REQUEUE)
            return
        self.committer.read_ok()
        for message in messages:
            carried = False  # whether one of its own evaluations will carry its sends
            for job in message.jobs:
                if job.evaluation_id in done:
                    _log.info(
                        "already evaluated: %s %s (trace %s)",
                        job.snapshot_id[:16],
                        job.metric_set.version,
                        job.trace_label,
                    )
                    metrics.observe_duplicate(job.lane.value)
                else:
                    evaluation, started = self._evaluation_of(job, message)
                    message.writes.append(evaluation)
                    carried = carried or started
            if message.sends and not carried:
                _write_later(message, self._sends_alone(message))
            self._settle_when_written(message)

    async def _sends_alone(self, message: _Message) -> None:
        sends = message.take_sends()
        if sends:
            lane = message.delivery.lane or Lane.BACKFILL
            await self.committer.send(sends, urgent=lane is Lane.LIVE)

    def _evaluation_of(self, job: _Job, message: _Message) -> tuple[asyncio.Future[Any], bool]:
        """The evaluation of ``job`` — the one under way for the same id, or a new one — and
        whether it is new (then it carries the message's sends)."""
        under_way = self._under_way.get(job.evaluation_id)
        if under_way is not None and not under_way.done():
            _log.info(
                "already being evaluated: %s (trace %s)", job.snapshot_id[:16], job.trace_label
            )
            metrics.observe_duplicate(job.lane.value)
            return under_way, False
        started = asyncio.ensure_future(self._evaluated(job, message))
        self._under_way[job.evaluation_id] = started
        started.add_done_callback(lambda _: self._under_way.pop(job.evaluation_id, None))
        return started, True

    async def _existing(self, evaluation_ids: list[str]) -> frozenset[str]:
        return await self.rt.in_store_thread(self.rt.store.existing_evaluations, evaluation_ids)

    async def _evaluated(self, job: _Job, message: _Message) -> None:
        try:
            urgent = job.lane is Lane.LIVE
            finished = await self.rt.evaluate(job.trace, job.metric_set.name, urgent=urgent)
            record = _evaluation_record(self.rt, job, finished)
        except SlotsClosedError:
            raise  # never started (warm shutdown): its message goes back to the broker
        except Exception as exc:  # noqa: BLE001 - a bug: kept as a dead letter, never looped
            _log.error(
                "evaluation failed: %s (%s)", DeadLetterCode.INTERNAL_ERROR, type(exc).__name__
            )
            await self._keep(job, message, DeadLetterCode.INTERNAL_ERROR)
            return
        try:
            written = await self.committer.write(
                record, job.content, urgent=job.lane is Lane.LIVE, sends=message.take_sends()
            )
        except Exception as exc:  # refused for good, or a bug: kept, never looped
            if _passing(exc):
                raise  # store trouble that may pass, a halt, a shutdown: back to the broker
            await self._keep(job, message, _refusal(exc))
            return
        _observe(job, record, finished, written.created)
        if written.created and self.events is not None:
            _emit(self.events, job, record)

    async def _keep(self, job: _Job, message: _Message, code: DeadLetterCode) -> None:
        """``job``'s snapshot as a ``code`` dead letter, kept for redrive; then the message's
        sends, if no evaluation of it carried them."""
        raw = job.content.canonical_text.encode("utf-8")
        await self._write_dead_letter(code, message.delivery.task, job.lane.value, raw)
        await self._sends_alone(message)

    # -- writing --------------------------------------------------------------------------------

    def _dead_letter(self, message: _Message, code: DeadLetterCode, raw: bytes) -> None:
        _write_later(message, self._message_dead_letter(message, code, raw))

    async def _message_dead_letter(
        self, message: _Message, code: DeadLetterCode, raw: bytes
    ) -> None:
        delivery = message.delivery
        lane = delivery.lane.value if delivery.lane else None
        await self._write_dead_letter(code, delivery.task, lane, raw)

    async def _write_dead_letter(
        self, code: DeadLetterCode, task: str | None, lane: str | None, raw: bytes
    ) -> None:
        """Write one dead letter. One the store refuses for good (or a bug writing it) halts
        this process: the dead letter is the last resort, so every message the store cannot
        keep would be requeued, fetched and refused again for ever (an evaluation's judged
        again each time). Halted, the message goes back to the broker, nothing more is acked,
        and the process exits 75 with the store's code on one line."""
        try:
            await self.committer.call(record_dead_letter, self.rt.store, code, task, lane, raw)
        except Exception as exc:
            if not _passing(exc):
                self.rt.halt.stop(_halt_code(exc), _DEAD_LETTER_REFUSED)
            raise
        metrics.observe_dead_letter(code.value, lane or metrics.OTHER)

    async def _write_or_keep(
        self, message: _Message, work: Callable[..., DeadLetterCode | None], *args: Any
    ) -> None:
        """``work`` (an outcome's or a tally's record) in the store thread. The message becomes a
        dead letter, through the one writer that halts when even that is refused, when ``work``
        says so (its code: an outcome's conflict) or when the store refuses it for good (or a bug
        writing it): kept for redrive and acked, instead of requeued and refused again for ever."""
        try:
            kept = await self.committer.call(work, *args)
        except Exception as exc:
            if _passing(exc):
                raise  # store trouble that may pass, a halt, a shutdown: back to the broker
            kept = _refusal(exc)
        if kept is not None:
            await self._message_dead_letter(message, kept, message.delivery.raw)

    def _record_outcome(self, record: OutcomeRecord) -> DeadLetterCode | None:
        """Record the outcome; an event id stored with other content is a conflict.

        The stored outcome stays as it was (append-only); the conflicting event is kept as an
        ``OUTCOME_CONFLICT`` dead letter with the message as it came (the caller writes it). An
        identical resend is absorbed (nothing written).
        """
        written = self.rt.store.record_outcome(record)
        if written.conflict:
            return DeadLetterCode.OUTCOME_CONFLICT
        state = "recorded" if written.created else "already recorded"
        _log.info(
            "outcome %s: linked to %d evaluation(s) (trace %s)",
            state,
            len(written.linked),
            trace_label(record.trace_id),
        )
        return None

    def _record_tally(self, tally: TallyRecord) -> None:
        """Record the sampling tally (an identical resend is absorbed); ``None``: nothing to keep
        as a dead letter."""
        written = self.rt.store.record_tally(tally)
        state = "recorded" if written.created else "already recorded"
        _log.info("sampling tally %s: %d row(s)", state, len(tally.rows))

    def _settle_when_written(self, message: _Message) -> None:
        """The verdict once every write of the message is done: ACK, or REQUEUE (store trouble,
        an evaluation not started before a warm shutdown)."""
        message.watched = True
        if message.verdict.done():
            return
        if not message.writes:
            _settle(message.verdict, Verdict.ACK)
            return
        gathered = asyncio.gather(*message.writes, return_exceptions=True)
        gathered.add_done_callback(lambda done: _settle(message.verdict, _verdict_of(done)))


def _write_later(message: _Message, write: Coroutine[Any, Any, None]) -> None:
    """Schedule one of ``message``'s writes; its verdict waits for every one of them."""
    message.writes.append(asyncio.ensure_future(write))


def _passing(exc: Exception) -> bool:
    """Whether a failed write may succeed on redelivery: transient store trouble (a halt
    included) or a store this process closed (a shutdown)."""
    closed = isinstance(exc, StoreError) and exc.code == StoreCode.STORE_CLOSED
    return closed or isinstance(exc, TransientStoreError)


_DEAD_LETTER_REFUSED = "the store refused a dead letter, the last resort for what it cannot keep"


def _halt_code(exc: Exception) -> str:
    """The halt's reason code for a dead letter that failed for good: the store's, or
    ``INTERNAL_ERROR`` for a bug (never the exception's text)."""
    if isinstance(exc, StoreError):
        return str(exc.code)
    return DeadLetterCode.INTERNAL_ERROR.value


def _refusal(exc: Exception) -> DeadLetterCode:
    """The dead letter a record the store did not take becomes (logged by code)."""
    if isinstance(exc, PermanentStoreError):
        _log.error("record refused: %s (%s)", DeadLetterCode.RECORD_REFUSED, exc.code)
        return DeadLetterCode.RECORD_REFUSED
    _log.error("record failed: %s (%s)", DeadLetterCode.INTERNAL_ERROR, type(exc).__name__)
    return DeadLetterCode.INTERNAL_ERROR


def _items(payload: Any) -> list[Any]:
    items = payload if isinstance(payload, list) else [payload]
    if not items:
        raise RefusedError(DeadLetterCode.BAD_ARGUMENTS)
    if len(items) > MAX_BATCH_ITEMS:
        raise RefusedError(DeadLetterCode.BATCH_TOO_LARGE)
    return items


def _outcome_record(event: OutcomeEvent) -> OutcomeRecord:
    fields = event.model_dump(mode="json", exclude={"schema_version"})
    return OutcomeRecord.model_validate(fields)


def _tally_record(tally: SamplingTally) -> TallyRecord:
    return TallyRecord.model_validate(tally.model_dump(mode="json", exclude={"schema_version"}))


def _verdict_of(done: asyncio.Future[list[Any]]) -> Verdict:
    """ACK if every write went through; REQUEUE if the store failed (logged, never acked) or an
    evaluation never started before a warm shutdown (its records are not all there yet)."""
    failures = [r for r in done.result() if isinstance(r, BaseException)]
    faults = [f for f in failures if not isinstance(f, SlotsClosedError)]
    if len(faults) < len(failures):
        not_started = len(failures) - len(faults)
        _log.info("message returned to the broker: %d evaluation(s) not started", not_started)
    for failure in faults:
        code = getattr(failure, "code", type(failure).__name__)
        if not isinstance(failure, TransientStoreError | StoreError):
            _log.error("write failed: %s (%s)", DeadLetterCode.INTERNAL_ERROR, code)
        else:
            _log.error("store could not record: %s; message requeued", code)
    return Verdict.REQUEUE if failures else Verdict.ACK


def _settle(verdict: asyncio.Future[Verdict], value: Verdict) -> None:
    if not verdict.done():
        verdict.set_result(value)


def _observe(
    job: _Job, record: EvaluationRecord, finished: FinishedEvaluation, created: bool
) -> None:
    if created:
        metrics.observe_reports(record.lane, [finished.report], overloaded=finished.overloaded)
        _log.info(
            "evaluation recorded: %s (%s%s, trace %s)",
            job.snapshot_id[:16],
            record.metric_set_version,
            f" {record.run}" if record.run else "",
            job.trace_label,
        )
    else:
        metrics.observe_duplicate(record.lane)
        _log.info(
            "evaluation already recorded: %s (trace %s)", job.snapshot_id[:16], job.trace_label
        )


def _emit(sink: EventSink, job: _Job, record: EvaluationRecord) -> None:
    """The committed record's results as events; a failure here never touches the record."""
    try:
        events = result_events(
            job.snapshot, record, snapshot_id=job.snapshot_id, evaluation_id=job.evaluation_id
        )
        sink.emit(events)
    except Exception as exc:  # noqa: BLE001 - the record is committed; its ack must go on
        _log.error("evaluation events failed: INTERNAL_ERROR (%s)", type(exc).__name__)


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.error("handler failed (%s)", type(task.exception()).__name__)
