"""Size and batching limits: the producer never sends what a worker would refuse for size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from producer._backfill import backfill_rule
from producer._reader import MAX_LINE_BYTES
from producer.snapshot import MAX_BATCH_ITEMS, MAX_ITEM_BYTES
from tests.hostile.hostile_kit import chat_line, chat_record, evalq, record, write
from tests.producer.producer_kit import queue_length, queued_payloads
from worker.canonical_json import canonical_json
from worker.store import DeadLetterRecord, Store

pytestmark = pytest.mark.services


def test_a_50_mb_line_is_refused_at_the_producer_with_its_line(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A 50 MB line is one LINE_TOO_LARGE rejection; the lines around it are sent."""
    # Skipped unread: peak RSS stays far below the 10 x 50 MB it used to take.
    path = workdir / "big.jsonl"
    with path.open("w", encoding="utf-8") as out:
        out.write(chat_line(1))
        huge = json.dumps(chat_record(2, text="x" * (50 * 1024 * 1024)))
        out.write(huge + "\n")
        out.write(chat_line(3))
    done = evalq(env, "enqueue", str(path))
    assert done.returncode == 1, done.stderr
    assert f"{path}:2: $: LINE_TOO_LARGE" in done.stderr
    assert "enqueued 2 snapshot(s); rejected lines: 1" in done.stdout
    assert queue_length(redis_url, "evalq.live") == 2
    assert done.peak_rss_mib < 160, done.peak_rss_mib  # was 529 MB; ~90 MB doing nothing
    record("enqueue: one 50 MB line", f"LINE_TOO_LARGE file:2, 2 sent, {done.peak_rss_mib:.0f} MiB")


def test_a_snapshot_over_the_worker_limit_is_refused_with_its_line(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A line under the line limit whose snapshot is over MAX_ITEM_BYTES: PAYLOAD_TOO_LARGE."""
    assert MAX_ITEM_BYTES + 1024 < MAX_LINE_BYTES
    big = json.dumps(chat_record(2, text="y" * (MAX_ITEM_BYTES + 1024)))
    path = write(workdir / "t.jsonl", chat_line(1) + big + "\n" + chat_line(3))
    done = evalq(env, "enqueue", str(path))
    assert done.returncode == 1, done.stderr
    assert f"{path}:2: $: PAYLOAD_TOO_LARGE" in done.stderr
    assert queue_length(redis_url, "evalq.live") == 2
    record("enqueue: snapshot over MAX_ITEM_BYTES", "PAYLOAD_TOO_LARGE file:2, 2 sent, exit 1")


def test_a_producer_batch_size_above_the_contract_is_split(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """EVALQ_BATCH_SIZE=500 never makes a message of more than MAX_BATCH_ITEMS snapshots."""
    count = MAX_BATCH_ITEMS * 2 + 5
    path = write(workdir / "t.jsonl", "".join(chat_line(i) for i in range(count)))
    done = evalq({**env, "batch_size": "500"}, "backfill", str(path), "--id", "big-batches")
    assert done.returncode == 0, done.stderr
    sizes = sorted(len(args[0]) for args in queued_payloads(redis_url, "evalq.backfill"))
    assert sizes == [5, MAX_BATCH_ITEMS, MAX_BATCH_ITEMS]
    record("backfill: EVALQ_BATCH_SIZE=500", f"messages of {sizes} items (<= MAX_BATCH_ITEMS)")


def test_a_backfill_counts_its_dead_lettered_snapshots_as_failed(
    workdir: Path, env: dict[str, str], store: Store
) -> None:
    """Snapshots of the backfill in open dead letters are 'failed' (exit 1), not silence."""
    path = write(workdir / "t.jsonl", "".join(chat_line(i) for i in range(6)))
    done = evalq({**env, "batch_size": "3"}, "backfill", str(path), "--id", "dl")
    assert done.returncode == 0, done.stderr
    assert "failed 0" in done.stdout
    # What a worker that refused one whole message writes: the message's items, as JSON.
    rule = backfill_rule("dl")
    items = [{"trace_id": f"t{i}", "sampling": {"lane": "backfill", "rule": rule}} for i in (0, 1)]
    other = {"trace_id": "x", "sampling": {"lane": "backfill", "rule": "backfill:dl-other"}}
    for payload in (items, [other]):
        store.record_dead_letter(
            DeadLetterRecord(
                reason="BATCH_TOO_LARGE",
                task="evalq.evaluate",
                lane="backfill",
                payload=canonical_json(payload).encode(),
            )
        )
    again = evalq(env, "backfill", str(path), "--resume", "dl")
    assert again.returncode == 1, again.stderr
    assert "failed 2" in again.stdout
    assert "2 snapshot(s) of this backfill failed" in again.stderr
    status = evalq(env, "status", "--json")
    backfills = {b["backfill_id"]: b for b in json.loads(status.stdout)["backfills"]}
    assert (backfills["dl"]["state"], backfills["dl"]["failed"]) == ("failed", 2)
    record("backfill: its snapshots dead-lettered", "'failed 2', exit 1; status: state failed")
