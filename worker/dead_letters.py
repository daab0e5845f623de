"""Dead letters: every reason code, defined once, and the one writer.

A message that cannot be decoded, validated or evaluated becomes a dead-letter record (reason
code, task name, lane, the raw bytes it came as — bounded by the store) and is then acked: never
retried forever, never lost. :func:`redrive` (``evalq redrive``) re-enqueues what a worker would
accept now, after a fix.

This module imports no Celery, kombu or metrics: the consumer, the handler, metrics and redrive
all read the codes from here (the handler counts what it writes). Redrive publishes through any
object with a producer's ``send_many``/``outcome``/``send_tally`` (:class:`Resender`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import ValidationError

from producer.snapshot import (
    MAX_ITEM_BYTES,
    Lane,
    OutcomeEvent,
    SamplingTally,
    Snapshot,
    WindowViolation,
)
from worker.metric_sets import METRIC_SETS
from worker.store import DeadLetter, DeadLetterRecord, Store

__all__ = [
    "NOT_REDRIVABLE",
    "REDRIVE_SHOWN",
    "DeadLetterCode",
    "RedriveSkip",
    "RedriveSummary",
    "Resender",
    "raw_bytes",
    "record_dead_letter",
    "redrive",
]

_log = logging.getLogger(__name__)


class DeadLetterCode(StrEnum):
    """Why a message (or one item of a backfill batch) became a dead letter."""

    # The message never reached a task body (the consumer refused it).
    CONTENT_DISALLOWED = "CONTENT_DISALLOWED"  # a serializer other than JSON (e.g. pickle)
    UNDECODABLE = "UNDECODABLE"  # not a kombu envelope, bad body encoding, malformed JSON
    UNKNOWN_TASK = "UNKNOWN_TASK"  # a task name evalq does not serve (Celery built-ins too)
    UNKNOWN_MESSAGE = "UNKNOWN_MESSAGE"  # not a Celery task message at all
    INVALID_MESSAGE = "INVALID_MESSAGE"  # a task message that breaks the protocol
    SCHEDULED = "SCHEDULED"  # an ``eta``/``countdown``: evalq evaluates what arrives, now
    EXPIRED = "EXPIRED"  # its ``expires`` had passed when it arrived
    # The task body refused the item.
    BAD_ARGUMENTS = "BAD_ARGUMENTS"
    SCHEMA_INVALID = "SCHEMA_INVALID"
    UNSUPPORTED_SCHEMA_VERSION = "UNSUPPORTED_SCHEMA_VERSION"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    BATCH_TOO_LARGE = "BATCH_TOO_LARGE"
    WINDOW_VIOLATION = "WINDOW_VIOLATION"
    TRACE_INVALID = "TRACE_INVALID"
    UNKNOWN_METRIC_SET = "UNKNOWN_METRIC_SET"
    # The store refused the item's record for good (a permission, a constraint): an
    # evaluation's, an outcome's or a sampling tally's.
    RECORD_REFUSED = "RECORD_REFUSED"
    # An outcome event whose event_id is stored with other content (the stored one is kept).
    OUTCOME_CONFLICT = "OUTCOME_CONFLICT"
    INTERNAL_ERROR = "INTERNAL_ERROR"  # a bug; the item is kept for redrive


NOT_REDRIVABLE = frozenset({DeadLetterCode.OUTCOME_CONFLICT})
"""Reasons a redrive cannot cure: re-sending the payload would only dead-letter it again."""


def raw_bytes(item: Any) -> bytes:
    """The bytes a dead letter keeps of ``item``: bytes as they are, anything else as JSON.

    JSON is written leniently (NaN, lone surrogates escaped) so an item the strict canonical
    form refuses is still kept as the text it was, never as a type name.
    """
    if isinstance(item, bytes | bytearray | memoryview):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8", "backslashreplace")
    try:
        return json.dumps(item, ensure_ascii=True, sort_keys=True).encode("ascii")
    except (TypeError, ValueError, RecursionError):
        return repr(item).encode("utf-8", "backslashreplace")[: 64 * 1024]


def record_dead_letter(
    store: Store, code: DeadLetterCode, task: str | None, lane: str | None, raw: bytes
) -> str:
    """Write one dead letter (the store bounds the payload); raises the store's errors."""
    record = DeadLetterRecord(reason=code.value, task=task, lane=lane, payload=raw)
    dead_letter_id = store.record_dead_letter(record)
    _log.warning("dead letter: %s (task %s)", code.value, task or "-")
    return dead_letter_id


# --- redrive ---------------------------------------------------------------------------------


class Resender(Protocol):
    """What redrive publishes through (a :class:`producer.Producer`)."""

    def send_many(
        self, snapshots: Iterable[Snapshot], *, lane: Lane | None = None, batch_size: int = 1
    ) -> int: ...

    def outcome(self, event: OutcomeEvent) -> object: ...

    def send_tally(self, tally: SamplingTally) -> object: ...


REDRIVE_SHOWN = 20
"""Dead letters a redrive names individually among those it left open."""


@dataclass(frozen=True)
class RedriveSkip:
    """A dead letter left open: its id, its reason, and why it was not re-enqueued (a code).

    ``code``: ``TRUNCATED`` (only the head of the payload was kept), ``UNDECODABLE`` (the
    payload is not JSON text), ``UNKNOWN_PAYLOAD`` (no snapshot, outcome or tally), or the
    worker's reason code it would be dead-lettered with again (``UNKNOWN_METRIC_SET``,
    ``WINDOW_VIOLATION``, ``JSON_TOO_DEEP``, ...). ``items`` counts the snapshots that are
    still invalid (the valid ones of a batch were re-enqueued).
    """

    dead_letter_id: str
    reason: str
    code: str
    items: int = 1

    def __str__(self) -> str:
        return f"{self.dead_letter_id} ({self.reason}): {self.code}"


@dataclass(frozen=True)
class RedriveSummary:
    """What one redrive did: dead letters examined, re-enqueued, and still invalid (left open).

    ``skipped`` names the first :data:`REDRIVE_SHOWN` dead letters left open, with the code of
    why; a dead letter that would be dead-lettered again is never re-enqueued.
    """

    examined: int
    redriven: int
    still_invalid: int
    skipped: tuple[RedriveSkip, ...] = ()


class _StillInvalidError(Exception):
    """A payload that a worker would refuse again (``code``)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _unwrap(body: Any) -> Any:
    """The task argument in a raw body (``[args, kwargs, embed]`` or ``{args, kwargs}``)."""
    if isinstance(body, list) and len(body) == 3 and isinstance(body[0], list):
        args, kwargs = body[0], body[1]
    elif isinstance(body, dict) and set(body) == {"args", "kwargs"}:
        args, kwargs = body["args"], body["kwargs"]
    else:
        return body
    return args[0] if isinstance(args, list) and len(args) == 1 and not kwargs else None


def _sendable_json(model: Snapshot | OutcomeEvent | SamplingTally) -> None:
    """Raise :class:`_StillInvalidError` if the worker's size or depth checks would refuse it."""
    try:
        text = model.model_dump_json()  # pydantic stops at a nesting depth of about 255
        size = len(text.encode("utf-8"))
    except (ValueError, RecursionError):  # includes UnicodeEncodeError (lone surrogates)
        raise _StillInvalidError("JSON_TOO_DEEP") from None
    if size > MAX_ITEM_BYTES:
        raise _StillInvalidError("PAYLOAD_TOO_LARGE")


def _accepted_snapshot(item: Any) -> Snapshot:
    """The snapshot a worker would evaluate now, else :class:`_StillInvalidError` with its code."""
    try:
        snapshot = Snapshot.model_validate(item)
    except ValidationError:
        raise _StillInvalidError(DeadLetterCode.SCHEMA_INVALID) from None
    _sendable_json(snapshot)
    try:
        snapshot.trace()
    except WindowViolation:
        raise _StillInvalidError("WINDOW_VIOLATION") from None
    except (ValueError, RecursionError):
        raise _StillInvalidError("TRACE_INVALID") from None
    if snapshot.metric_set not in METRIC_SETS:
        raise _StillInvalidError(DeadLetterCode.UNKNOWN_METRIC_SET)
    return snapshot


def _as_snapshots(item: Any) -> tuple[list[Snapshot], list[str]] | None:
    """(valid snapshots, codes of the invalid items), or None when no item is a snapshot."""
    items = item if isinstance(item, list) and item else [item]
    valid: list[Snapshot] = []
    codes: list[str] = []
    for one in items:
        try:
            valid.append(_accepted_snapshot(one))
        except _StillInvalidError as exc:
            codes.append(exc.code)
    looks_like_snapshots = any(isinstance(i, dict) and "events" in i for i in items)
    if not valid and not looks_like_snapshots:
        return None
    return valid, codes


def _as_outcome(item: Any) -> OutcomeEvent | None:
    try:
        event = OutcomeEvent.model_validate(item)
    except ValidationError:
        return None
    _sendable_json(event)
    return event


def _as_tally(item: Any) -> SamplingTally | None:
    try:
        tally = SamplingTally.model_validate(item)
    except ValidationError:
        return None
    _sendable_json(tally)
    return tally


def _decode_payload(dead: DeadLetter) -> Any:
    if dead.truncated:
        raise _StillInvalidError("TRUNCATED")
    try:
        return _unwrap(json.loads(dead.payload.decode("utf-8"), parse_constant=_no_constant))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _StillInvalidError("UNDECODABLE") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")


def _redrive_one(dead: DeadLetter, producer: Resender, batch_size: int) -> RedriveSkip | None:
    """Re-enqueue one dead letter if a worker would accept it now; else why it stays open.

    Of a batch, the valid snapshots are re-enqueued and the dead letter stays open (naming the
    items still invalid): re-sending the valid ones again later is absorbed by idempotency.
    """
    try:
        item = _decode_payload(dead)
        snapshots = _as_snapshots(item)
        if snapshots is not None:
            valid, codes = snapshots
            if valid:
                lane = Lane(dead.lane) if dead.lane in tuple(Lane) else None
                size = min(batch_size, len(valid))
                producer.send_many(valid, lane=lane, batch_size=size)
            if codes:
                return RedriveSkip(dead.dead_letter_id, dead.reason, codes[0], len(codes))
            return None
        event = _as_outcome(item)
        if event is not None:
            producer.outcome(event)
            return None
        tally = _as_tally(item)
        if tally is not None:
            producer.send_tally(tally)
            return None
    except _StillInvalidError as exc:
        return RedriveSkip(dead.dead_letter_id, dead.reason, exc.code)
    return RedriveSkip(dead.dead_letter_id, dead.reason, "UNKNOWN_PAYLOAD")


def redrive(
    store: Store, producer: Resender, *, reason: str | None = None, batch_size: int = 1
) -> RedriveSummary:
    """Re-enqueue every open dead letter (optionally of one reason code) a worker accepts now.

    Each one sent gets a redrive record (after the publish: a crash in between re-sends it next
    time, which the workers' idempotency absorbs). The rest stay open and are reported: a
    payload that cannot be decoded (truncated, not JSON) is skipped, and one that a worker
    would dead-letter again (an unknown metric set, a window violation, too deep or too large,
    an outcome conflict) is "still invalid", never re-enqueued, so repeated redrives converge.
    """
    examined = redriven = left = 0
    skipped: list[RedriveSkip] = []
    for dead in store.open_dead_letters(reason):
        examined += 1
        skip = (  # e.g. OUTCOME_CONFLICT: re-sent, it would only come back
            RedriveSkip(dead.dead_letter_id, dead.reason, dead.reason)
            if dead.reason in NOT_REDRIVABLE
            else _redrive_one(dead, producer, batch_size)
        )
        if skip is None:
            store.record_redrive(dead.dead_letter_id)
            redriven += 1
            continue
        left += 1
        if len(skipped) < REDRIVE_SHOWN:
            skipped.append(skip)
    return RedriveSummary(examined, redriven, left, tuple(skipped))
