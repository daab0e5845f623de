"""Dead letters: every reason code, defined once, and the one writer.

A message that cannot be decoded, validated or evaluated becomes a dead-letter record (reason
code, task name, lane, the raw bytes it came as — bounded by the store) and is then acked: never
retried forever, never lost. ``evalq redrive`` re-enqueues what decodes after a fix.

This module imports no Celery, kombu or metrics: the consumer, the handler, metrics and redrive
all read the codes from here (the handler counts what it writes).
"""

from __future__ import annotations

import json
import logging
from enum import StrEnum
from typing import Any

from worker.store import DeadLetterRecord, Store

__all__ = ["NOT_REDRIVABLE", "DeadLetterCode", "raw_bytes", "record_dead_letter"]

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
