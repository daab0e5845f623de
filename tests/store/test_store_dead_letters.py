"""Dead letters (bounded payload, append-only redrive) and backfill checkpoints."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from worker.store import PAYLOAD_LIMIT_BYTES, DeadLetterRecord, PermanentStoreError, Store


def test_large_payload_is_truncated_with_size_and_hash(store: Store) -> None:
    """A payload over 64 KiB keeps its first 64 KiB, its full size, its sha256 and a flag."""
    payload = bytes(range(256)) * ((PAYLOAD_LIMIT_BYTES // 256) + 40)
    dead_id = store.record_dead_letter(
        DeadLetterRecord(reason="UNDECODABLE", task="evalq.evaluate", lane="live", payload=payload)
    )
    (letter,) = store.open_dead_letters()
    assert letter.dead_letter_id == dead_id
    assert letter.truncated
    assert letter.payload == payload[:PAYLOAD_LIMIT_BYTES]
    assert letter.payload_size == len(payload)
    assert letter.payload_sha256 == hashlib.sha256(payload).hexdigest()
    assert (letter.reason, letter.task, letter.lane) == ("UNDECODABLE", "evalq.evaluate", "live")


def test_small_payload_is_kept_whole(store: Store) -> None:
    """A small payload (text with lone surrogates included) is stored whole, not truncated."""
    text = "{'pickle': \udc80}"
    store.record_dead_letter(DeadLetterRecord(reason="PICKLE_REFUSED", payload=text))
    (letter,) = store.open_dead_letters()
    assert not letter.truncated
    assert letter.payload == text.encode("utf-8", "surrogatepass")
    assert letter.payload_size == len(letter.payload)


def test_redrive_closes_a_dead_letter_without_changing_it(store: Store) -> None:
    """A redrive row hides the letter from the open list; a second redrive is a no-op."""
    first = store.record_dead_letter(DeadLetterRecord(reason="MALFORMED_JSON", payload=b"{"))
    second = store.record_dead_letter(DeadLetterRecord(reason="INVALID_SNAPSHOT", payload=b"{}"))
    assert [d.dead_letter_id for d in store.open_dead_letters()] == [first, second]
    assert [d.dead_letter_id for d in store.open_dead_letters("INVALID_SNAPSHOT")] == [second]
    assert [d.dead_letter_id for d in store.open_dead_letters(limit=1)] == [first]
    assert store.record_redrive(first) is True
    assert store.record_redrive(first) is False
    assert [d.dead_letter_id for d in store.open_dead_letters()] == [second]
    assert store.open_dead_letters("MALFORMED_JSON") == ()


def test_redrive_of_unknown_dead_letter_is_refused(store: Store) -> None:
    """Redriving an id that was never recorded raises UNKNOWN_DEAD_LETTER."""
    with pytest.raises(PermanentStoreError) as caught:
        store.record_redrive("no-such-id")
    assert caught.value.code == "UNKNOWN_DEAD_LETTER"


def test_dead_letter_reason_must_be_a_code() -> None:
    """Free text (an exception message) is refused as a dead-letter reason."""
    with pytest.raises(ValidationError):
        DeadLetterRecord(reason="ValueError: bad input at line 3", payload=b"")


def test_latest_checkpoint_per_backfill_source(store: Store) -> None:
    """Checkpoints append; the latest per (backfill, source) wins and sources stay apart."""
    assert store.latest_checkpoint("bf-1", "a.jsonl") is None
    store.record_checkpoint("bf-1", "a.jsonl", offset=100, enqueued=10)
    last = store.record_checkpoint("bf-1", "a.jsonl", offset=250, enqueued=24)
    other = store.record_checkpoint("bf-1", "b.jsonl", offset=5, enqueued=1)
    assert store.latest_checkpoint("bf-1", "a.jsonl") == last
    assert store.latest_checkpoint("bf-1", "b.jsonl") == other
    assert store.latest_checkpoint("bf-2", "a.jsonl") is None
