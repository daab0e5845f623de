"""The Celery tasks, by stable name. Bodies are thin: decode → check window → evaluate → record.

``evalq.evaluate`` takes ONE positional argument: a snapshot wire dict (``Snapshot.wire()``), or a
list of them (a backfill batch of at most ``EVALQ_BATCH_SIZE``). The snapshots of a batch are
evaluated concurrently on the process loop, each with its own budget; their records are written
in one store transaction (one commit per message, not per snapshot). ``evalq.outcome`` takes ONE
positional argument: an ``OutcomeEvent.wire()`` dict.
``evalq.sampling_tally`` (outcomes lane) takes ONE positional argument: a ``SamplingTally.wire()``
dict of a producer's sampled-out counts; each row is stored once per tally id.

What happens to a message:

- It does not decode or validate → a dead-letter record with a reason code and the raw item
  (bounded by the store), then acked: never retried forever, never lost. ``evalq redrive``
  re-enqueues it after a fix. Codes: ``BAD_ARGUMENTS``, ``SCHEMA_INVALID``,
  ``UNSUPPORTED_SCHEMA_VERSION``, ``PAYLOAD_TOO_LARGE``, ``BATCH_TOO_LARGE``, ``WINDOW_VIOLATION``,
  ``TRACE_INVALID``, ``UNKNOWN_METRIC_SET``, ``INTERNAL_ERROR`` (a bug; the item is kept).
- Its snapshot already has an evaluation for this metric-set version → nothing new is written.
- Otherwise the engine evaluates it and the store records it (idempotently: a duplicate delivery
  racing this one writes nothing new). Every stored result repeats the window rule and cutoff
  (the store copies them from the snapshot); records of the synthetic judge say ``synthetic``.
- The store cannot write right now (after its own bounded retries) → the message is rejected
  with requeue: it stays with the broker and is tried again, never acked unrecorded.

Logs carry reason codes and snapshot ids, never exception text, keys or content.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject
from pydantic import ValidationError

from producer.snapshot import (
    ENQUEUED_AT_HEADER,
    EVALUATE_TASK,
    LANE_QUEUES,
    OUTCOME_TASK,
    SCHEMA_VERSION,
    TALLY_TASK,
    Lane,
    OutcomeEvent,
    SamplingTally,
    Snapshot,
    WindowViolation,
)
from worker import evaluators, metrics, runtime
from worker._json import canonical_json, compact_json, frozen_json
from worker.evaluation import Entry, Reason, Report, Status, Trace
from worker.evaluation import RequestUsage as ReportUsage
from worker.judges import Usage
from worker.metric_sets import MetricSet, UnknownMetricSetError
from worker.runtime import Runtime
from worker.store import (
    DeadLetterRecord,
    EvaluationRecord,
    MetricResultRecord,
    OutcomeRecord,
    PermanentStoreError,
    RequestUsage,
    SnapshotText,
    StoreError,
    TallyRecord,
    TransientStoreError,
    Written,
    evaluation_id_for,
)

__all__ = [
    "MAX_ITEM_BYTES",
    "DeadLetterReason",
    "evaluate_message",
    "register",
    "start_evaluators",
]

_log = logging.getLogger(__name__)
MAX_ITEM_BYTES = 4 * 1024 * 1024
"""Largest snapshot or outcome (canonical JSON) a worker accepts; larger is PAYLOAD_TOO_LARGE."""
_LANE_OF_QUEUE = {queue: lane for lane, queue in LANE_QUEUES.items()}
_JUDGED_REASONS = frozenset(
    {Reason.INVALID_RESPONSE, Reason.BACKEND_ERROR, Reason.REDUCE_ERROR, Reason.TIMEOUT}
)
_NO_ANSWER_REASONS = frozenset({Reason.BACKEND_ERROR, Reason.TIMEOUT})


class DeadLetterReason:
    """Reason codes of dead letters written by the task bodies."""

    BAD_ARGUMENTS = "BAD_ARGUMENTS"
    SCHEMA_INVALID = "SCHEMA_INVALID"
    UNSUPPORTED_SCHEMA_VERSION = "UNSUPPORTED_SCHEMA_VERSION"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    BATCH_TOO_LARGE = "BATCH_TOO_LARGE"
    WINDOW_VIOLATION = "WINDOW_VIOLATION"
    TRACE_INVALID = "TRACE_INVALID"
    UNKNOWN_METRIC_SET = "UNKNOWN_METRIC_SET"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class _RefusedError(Exception):
    """An item that cannot be evaluated; becomes a dead letter with ``code``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


# --- decoding ----------------------------------------------------------------------------------


def _one_argument(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    if len(args) != 1 or kwargs:
        raise _RefusedError(DeadLetterReason.BAD_ARGUMENTS)
    return args[0]


def _check_size(item: Any) -> None:
    try:  # unsorted: the same length as the canonical text, without the sorting
        text = compact_json(item)
    except ValueError:
        raise _RefusedError(DeadLetterReason.SCHEMA_INVALID) from None
    _check_text_size(text)


def _check_text_size(text: str) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: Python text, not JSON text
        raise _RefusedError(DeadLetterReason.SCHEMA_INVALID) from None
    if size > MAX_ITEM_BYTES:
        raise _RefusedError(DeadLetterReason.PAYLOAD_TOO_LARGE)


def _schema_code(item: Any) -> str:
    version = item.get("schema_version") if isinstance(item, Mapping) else None
    if version is not None and version != SCHEMA_VERSION:
        return DeadLetterReason.UNSUPPORTED_SCHEMA_VERSION
    return DeadLetterReason.SCHEMA_INVALID


def decode_snapshot(item: Any) -> Snapshot:
    """Validate one queued item as a :class:`Snapshot` (``_RefusedError`` with a code otherwise)."""
    return _decoded(item).snapshot


@dataclass(frozen=True)
class _Decoded:
    """A valid snapshot, its wire form and its canonical text (computed once)."""

    snapshot: Snapshot
    wire: dict[str, Any]
    canonical_text: str


def _decoded(item: Any) -> _Decoded:
    """Validate, then measure the canonical text the store writes anyway.

    The size limit is read off that text (the same length as the item's compact JSON for what a
    producer sends) instead of serializing every item once more only to measure it (measured:
    ~10% of the decoding CPU). An invalid item is measured first: an oversized one is
    ``PAYLOAD_TOO_LARGE``.
    """
    try:
        snapshot = Snapshot.model_validate(item)
    except ValidationError:
        _check_size(item)
        raise _RefusedError(_schema_code(item)) from None
    try:
        wire = snapshot.wire()
    except UnicodeEncodeError:  # a lone surrogate in a key: Python text, not JSON text
        raise _RefusedError(DeadLetterReason.SCHEMA_INVALID) from None
    # The wire of a valid snapshot is frozen JSON plus validated, finite fields.
    text = frozen_json(wire)
    _check_text_size(text)
    return _Decoded(snapshot, wire, text)


def decode_outcome(item: Any) -> OutcomeEvent:
    """Validate one queued item as an :class:`OutcomeEvent`."""
    _check_size(item)
    try:
        return OutcomeEvent.model_validate(item)
    except ValidationError:
        raise _RefusedError(_schema_code(item)) from None


def decode_tally(item: Any) -> SamplingTally:
    """Validate one queued item as a :class:`SamplingTally`."""
    _check_size(item)
    try:
        return SamplingTally.model_validate(item)
    except ValidationError:
        raise _RefusedError(_schema_code(item)) from None


def _project(snapshot: Snapshot) -> Trace:
    try:
        return snapshot.trace()
    except WindowViolation:
        raise _RefusedError(DeadLetterReason.WINDOW_VIOLATION) from None
    except ValueError:
        raise _RefusedError(DeadLetterReason.TRACE_INVALID) from None


# --- records -----------------------------------------------------------------------------------


def _raw(item: Any) -> bytes:
    try:
        return canonical_json(item).encode("utf-8")
    except ValueError:
        return repr(type(item)).encode("utf-8")  # not JSON: only its type is worth keeping


def _dead_letter(rt: Runtime, code: str, task: str, lane: Lane | None, item: Any) -> None:
    record = DeadLetterRecord(
        reason=code, task=task, lane=lane.value if lane else None, payload=_raw(item)
    )
    rt.store.record_dead_letter(record)
    metrics.observe_dead_letter(code, lane.value if lane else metrics.OTHER)
    _log.warning("dead letter: %s (%s)", code, task)


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


def _results(
    report: Report, metric_set: MetricSet, trace: Trace, model: str | None
) -> tuple[MetricResultRecord, ...]:
    by_id = {m.id: m for m in metric_set.metrics}
    rows = []
    for entry in report.results:
        result = entry.result
        qids = _question_ids(by_id[entry.id], trace, entry)
        answered = bool(qids) and result.reason not in _NO_ANSWER_REASONS
        # Built without re-validation: every field comes from the engine's validated
        # MetricResult and the evaluator's checked ids and versions, and ``checked`` applies the
        # record's own rules to them (re-validating and re-freezing the evidence was ~2% of a
        # busy worker's CPU, model_construct ~3 us a result).
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
                judge_model=model if answered else None,
                question_ids=qids,
            )
        )
    return tuple(rows)


@dataclass(frozen=True)
class _Job:
    """One accepted snapshot of a message: its content record, projection and metric set."""

    snapshot: Snapshot
    content: SnapshotText
    trace: Trace
    metric_set: MetricSet

    @property
    def snapshot_id(self) -> str:
        """The content id (computed once, from the canonical text)."""
        return self.content.snapshot_id


@dataclass(frozen=True)
class _Finished:
    """A finished job and the evaluation record to write."""

    job: _Job
    report: Report
    record: EvaluationRecord


def _usage_record(entry: ReportUsage) -> RequestUsage:
    """The stored form of one response's usage: its model and its usage object as JSON."""
    usage = entry.usage
    if usage is None:
        return RequestUsage.counted(entry.model, None)
    # Usage's own fields (no extras, serializers or computed fields), read directly: exact ints
    # dump to JSON as themselves, and model_dump cost ~2 us a response.
    counts = dict(usage.__dict__)
    if type(usage) is not Usage or not all(type(count) is int for count in counts.values()):
        counts = usage.model_dump(mode="json")
    return RequestUsage.counted(entry.model, counts)


def _evaluation_record(
    rt: Runtime, job: _Job, report: Report, lane: Lane | None, elapsed_s: float
) -> EvaluationRecord:
    settings = rt.settings
    model = _answering_model(report, rt.judge_model)
    # Checked, not re-validated: the results and usage are records already (measured: validating
    # the record and its usage cost ~14 us of a ~1.4 ms snapshot).
    return EvaluationRecord.checked(
        snapshot_id=job.snapshot_id,
        metric_set=job.metric_set.name,
        metric_set_version=job.metric_set.version,
        judge_kind=settings.judge.value,
        judge_model=model,
        synthetic=settings.judge.value == "synthetic",
        requests=report.requests,
        usage=tuple(_usage_record(u) for u in report.usage),
        elapsed_s=elapsed_s,
        lane=(lane or job.snapshot.sampling.lane).value,
        results=_results(report, job.metric_set, job.trace, model),
        outcome_criteria=settings.outcome_criteria,
    )


# --- the evaluate task -------------------------------------------------------------------------


def _runtime_of(task: Task[Any, Any]) -> Runtime:
    """This process's runtime (built from the settings of the app that runs ``task``).

    If it cannot be built now (store unreachable, say) the message goes back to the broker.
    """
    try:
        return runtime.current(getattr(task.app, "settings", None))
    except Exception as exc:  # noqa: BLE001 - whatever broke, the message must not be lost
        code = getattr(exc, "code", type(exc).__name__)
        _log.error("worker runtime unavailable (%s); message requeued", code)
        raise Reject("RUNTIME_UNAVAILABLE", requeue=True) from None


def _delivery_lane(task: Task[Any, Any]) -> Lane | None:
    info = getattr(task.request, "delivery_info", None) or {}
    queue = info.get("routing_key") or info.get("queue")
    return _LANE_OF_QUEUE.get(queue) if isinstance(queue, str) else None


def _observe_queue_wait(task: Task[Any, Any], lane: Lane | None) -> None:
    headers = getattr(task.request, "headers", None) or {}
    stamp = headers.get(ENQUEUED_AT_HEADER) if isinstance(headers, Mapping) else None
    if isinstance(stamp, int | float) and not isinstance(stamp, bool) and lane is not None:
        metrics.observe_queue_wait(lane.value, time.time() - float(stamp))


def _items(rt: Runtime, payload: Any) -> list[Any]:
    items = payload if isinstance(payload, list) else [payload]
    if not items:
        raise _RefusedError(DeadLetterReason.BAD_ARGUMENTS)
    if len(items) > rt.settings.batch_size:
        raise _RefusedError(DeadLetterReason.BATCH_TOO_LARGE)
    return items


def _accept(rt: Runtime, item: Any) -> _Job:
    """Decode, check the window and resolve the metric set (``_RefusedError`` with a code)."""
    decoded = _decoded(item)
    trace = _project(decoded.snapshot)
    try:
        metric_set, _ = rt.metric_set(decoded.snapshot.metric_set)
    except UnknownMetricSetError:
        raise _RefusedError(DeadLetterReason.UNKNOWN_METRIC_SET) from None
    # The canonical text is computed once: it gives the size, the content id and the record.
    content = SnapshotText.from_wire(decoded.wire, decoded.canonical_text)
    return _Job(decoded.snapshot, content, trace, metric_set)


def _not_done(rt: Runtime, jobs: list[_Job], lane: Lane | None) -> list[_Job]:
    """Skip-if-done for the whole message in one query: the jobs with no evaluation yet."""
    ids = [evaluation_id_for(j.snapshot_id, j.metric_set.version) for j in jobs]
    done = rt.store.existing_evaluations(ids)
    fresh = []
    for job, evaluation_id in zip(jobs, ids, strict=True):
        if evaluation_id in done:
            _log.info("already evaluated: %s %s", job.snapshot_id[:16], job.metric_set.version)
            metrics.observe_duplicate((lane or job.snapshot.sampling.lane).value)
        else:
            fresh.append(job)
    return fresh


def _accept_all(rt: Runtime, items: list[Any], lane: Lane | None) -> list[_Job]:
    """The items to evaluate: refused ones become dead letters, evaluated ones are skipped."""
    accepted = []
    for item in items:
        try:
            accepted.append(_accept(rt, item))
        except _RefusedError as refused:
            _dead_letter(rt, refused.code, EVALUATE_TASK, lane, item)
    return _not_done(rt, accepted, lane) if accepted else []


def _report_of(job: _Job, outcome: object, task_started_s: float) -> tuple[Report, float]:
    """The evaluation's report and the monotonic time its budget started."""
    if isinstance(outcome, runtime.Outcome):
        return outcome.report, outcome.started_s
    if isinstance(outcome, BaseException):
        raise outcome  # a bug in the evaluation path: the whole message is dead-lettered
    # The task-side backstop: the loop did not deliver in time. Record, never drop.
    _log.warning("task backstop: %s for %s", Reason.TIMEOUT, job.snapshot_id[:16])
    return runtime.timeout_report(job.trace.id, job.metric_set, 0.0), task_started_s


def _finished(
    rt: Runtime, job: _Job, outcome: object, lane: Lane | None, task_started_s: float
) -> _Finished:
    report, started_s = _report_of(job, outcome, task_started_s)
    # elapsed_s runs from the evaluation's start (its budget's start) to the hand-over of the
    # record, so the stored value bounds "recorded within budget + margin" honestly.
    elapsed_s = time.monotonic() - started_s
    return _Finished(job, report, _evaluation_record(rt, job, report, lane, elapsed_s))


def _write(rt: Runtime, finished: list[_Finished]) -> list[Written]:
    """Short transactions for the whole message (rows built before the lock is taken): one on
    PostgreSQL, one per ``SQLITE_BULK_ROWS`` evaluations on SQLite, as bulk writer turns.

    If the batch is refused for good, the records are written one by one, so every record
    before the offending one is kept (the single-record behaviour) and the error surfaces there.
    """
    try:
        return rt.store.record_evaluations([(f.record, f.job.content) for f in finished])
    except PermanentStoreError:
        return [rt.store.record_evaluation(f.record, f.job.content) for f in finished]


def _observe(finished: list[_Finished], written: list[Written]) -> None:
    """Metrics for the whole message; a log line per live evaluation, one per backfill batch."""
    created: dict[str, list[Report]] = {}
    for f, w in zip(finished, written, strict=True):
        if w.created:
            created.setdefault(f.record.lane, []).append(f.report)
        else:
            metrics.observe_duplicate(f.record.lane)
        if len(finished) == 1:
            state = "recorded" if w.created else "already recorded"
            _log.info(
                "evaluation %s: %s (%s)", state, f.job.snapshot_id[:16], f.record.metric_set_version
            )
    for lane, reports in created.items():
        metrics.observe_reports(lane, reports)
    if len(finished) > 1:
        size, new = len(finished), sum(len(r) for r in created.values())
        _log.info("evaluations recorded: %d new, %d already (batch)", new, size - new)


def _evaluate_items(rt: Runtime, items: list[Any], lane: Lane | None) -> None:
    started = time.monotonic()
    jobs = _accept_all(rt, items, lane)
    if not jobs:
        return
    submitted = rt.submit_many([(job.trace, job.metric_set.name) for job in jobs])
    submitted.wait(rt.settings.longest_task_s)
    outcomes = list(submitted.outcomes)  # a stable copy: late finishers no longer count
    finished = [_finished(rt, j, o, lane, started) for j, o in zip(jobs, outcomes, strict=True)]
    _observe(finished, _write(rt, finished))


def _guarded(
    rt: Runtime, task_name: str, lane: Lane | None, payload: Any, work: Callable[[], None]
) -> None:
    """Run ``work``; map store trouble to requeue and bugs to an INTERNAL_ERROR dead letter."""
    try:
        work()
    except TransientStoreError as exc:
        _log.error("store unavailable: %s; message requeued", exc.code)
        raise Reject(exc.code, requeue=True) from None
    except _RefusedError as refused:
        _store_or_requeue(rt, refused.code, task_name, lane, payload)
    except StoreError as exc:
        _log.error("store refused a write: %s", exc.code)
        _store_or_requeue(rt, DeadLetterReason.INTERNAL_ERROR, task_name, lane, payload)
    except Exception as exc:  # noqa: BLE001 - a bug must not ack the message away unrecorded
        _log.error("task failed: %s (%s)", DeadLetterReason.INTERNAL_ERROR, type(exc).__name__)
        _store_or_requeue(rt, DeadLetterReason.INTERNAL_ERROR, task_name, lane, payload)


def _store_or_requeue(
    rt: Runtime, code: str, task_name: str, lane: Lane | None, payload: Any
) -> None:
    try:
        _dead_letter(rt, code, task_name, lane, payload)
    except StoreError as exc:
        _log.error("dead letter not recorded: %s (%s); message requeued", code, exc.code)
        raise Reject(exc.code, requeue=True) from None


def evaluate_message(
    rt: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any], lane: Lane | None
) -> str | None:
    """Evaluate and record one message's snapshots; ``None``, or the code to requeue it with.

    The whole of ``evalq.evaluate`` but for the broker: it runs in the worker process, or in an
    evaluator process (``worker.evaluators``), which answers with the returned code.
    """
    payload = args[0] if len(args) == 1 else {"args": list(args), "kwargs": kwargs}

    def work() -> None:
        _evaluate_items(rt, _items(rt, _one_argument(args, kwargs)), lane)

    try:
        _guarded(rt, EVALUATE_TASK, lane, payload, work)
    except Reject as requeued:
        return str(requeued.args[0])  # Reject(reason, requeue): its stubs omit .reason
    return None


def start_evaluators(rt: Runtime) -> evaluators.EvaluatorPool:
    """This process's evaluator processes (``EVALQ_EVALUATOR_PROCESSES``), started once."""
    return evaluators.current(rt.settings, evaluate_message)


def _in_evaluator(
    rt: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any], lane: Lane | None
) -> str | None:
    try:
        return start_evaluators(rt).run(args, kwargs, lane)
    except evaluators.EvaluatorError as exc:
        _log.error("evaluator unavailable: %s; message requeued", exc.code)
        return exc.code


def evaluate(task: Task[Any, Any], *args: Any, **kwargs: Any) -> None:
    """``evalq.evaluate``: one snapshot dict, or a list of them (a backfill batch)."""
    rt = _runtime_of(task)
    lane = _delivery_lane(task)
    _observe_queue_wait(task, lane)
    if rt.settings.evaluator_processes:
        requeue = _in_evaluator(rt, args, kwargs, lane)
    else:
        requeue = evaluate_message(rt, args, kwargs, lane)
    if requeue is not None:
        raise Reject(requeue, requeue=True)


# --- the outcome task --------------------------------------------------------------------------


def _outcome_record(event: OutcomeEvent) -> OutcomeRecord:
    fields = event.model_dump(mode="json", exclude={"schema_version"})
    return OutcomeRecord.model_validate(fields)


def outcome(task: Task[Any, Any], *args: Any, **kwargs: Any) -> None:
    """``evalq.outcome``: one OutcomeEvent dict; stored once and linked by the store."""
    rt = _runtime_of(task)
    lane = _delivery_lane(task)
    _observe_queue_wait(task, lane)
    payload = args[0] if len(args) == 1 else {"args": list(args), "kwargs": kwargs}

    def work() -> None:
        event = decode_outcome(_one_argument(args, kwargs))
        written = rt.store.record_outcome(_outcome_record(event))
        _log.info(
            "outcome %s: linked to %d evaluation(s)",
            "recorded" if written.created else "already recorded",
            len(written.linked),
        )

    _guarded(rt, OUTCOME_TASK, lane, payload, work)


# --- the sampling-tally task -------------------------------------------------------------------


def _tally_record(tally: SamplingTally) -> TallyRecord:
    return TallyRecord.model_validate(tally.model_dump(mode="json", exclude={"schema_version"}))


def sampling_tally(task: Task[Any, Any], *args: Any, **kwargs: Any) -> None:
    """``evalq.sampling_tally``: one SamplingTally dict; its rows are stored once per tally id."""
    rt = _runtime_of(task)
    lane = _delivery_lane(task)
    _observe_queue_wait(task, lane)
    payload = args[0] if len(args) == 1 else {"args": list(args), "kwargs": kwargs}

    def work() -> None:
        tally = decode_tally(_one_argument(args, kwargs))
        written = rt.store.record_tally(_tally_record(tally))
        _log.info(
            "sampling tally %s: %d row(s)",
            "recorded" if written.created else "already recorded",
            len(tally.rows),
        )

    _guarded(rt, TALLY_TASK, lane, payload, work)


_TASKS = ((EVALUATE_TASK, evaluate), (OUTCOME_TASK, outcome), (TALLY_TASK, sampling_tally))


def register(app: Celery) -> None:
    """Register every task on ``app`` under its stable name."""
    for name, body in _TASKS:
        # typing=False: arguments are checked in the body, so bad ones become dead letters.
        app.task(
            name=name,
            bind=True,
            acks_late=True,
            reject_on_worker_lost=True,
            ignore_result=True,
            typing=False,
            Request="worker.app:DecodedOnceRequest",
        )(body)
