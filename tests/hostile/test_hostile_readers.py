"""Input readers: garbage, FIFOs, ``/dev/stdin``, and pretty-printed JSON documents."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pytest

from tests.hostile.hostile_kit import chat_record, evalq, record, write
from tests.producer.producer_kit import queue_length, queued_payloads

pytestmark = pytest.mark.services


def _document(count: int, *, text_bytes: int = 0) -> str:
    records = [chat_record(i, text="z" * text_bytes or None) for i in range(count)]
    return json.dumps(records, indent=2) + "\n"


def _sent_ids(redis_url: str, queue: str = "evalq.live") -> list[str]:
    found: list[str] = []
    for args in queued_payloads(redis_url, queue):
        items = args[0] if isinstance(args[0], list) else [args[0]]
        found.extend(item["trace_id"] for item in items)
    return sorted(found)


def test_binary_garbage_exits_1_listing_20_rejections_and_how_many_more(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """Random bytes: exit 1, the first 20 rejections listed, then "and N more"; nothing sent."""
    path = workdir / "garbage.jsonl"
    path.write_bytes(random.Random(7).randbytes(200_000))
    done = evalq(env, "enqueue", str(path))
    assert done.returncode == 1, done.stderr
    rejected = int(done.stdout.split("rejected lines: ")[1].split()[0])
    assert rejected > 20
    listed = [line for line in done.stderr.splitlines() if line.strip().startswith(str(path))]
    assert len(listed) == 20
    assert f"… and {rejected - 20} more rejected lines" in done.stderr
    assert queue_length(redis_url, "evalq.live") == 0
    record("enqueue: 200 kB of random bytes", f"exit 1, 20 listed + 'and {rejected - 20} more'")


def test_a_fifo_is_read_once_as_a_stream_by_enqueue(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A pretty-printed document written into a FIFO is read once: 3 records sent, no hang."""
    fifo = workdir / "traces.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("w", encoding="utf-8") as out:  # blocks until the CLI opens it
            out.write(_document(3))

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    done = evalq(env, "enqueue", str(fifo), timeout_s=30)
    writer.join(5)
    assert done.returncode == 0, done.stderr
    assert _sent_ids(redis_url) == ["t0", "t1", "t2"]
    record("enqueue: pretty JSON from a FIFO", "read once as a stream, 3 sent, exit 0")


def test_a_fifo_is_refused_by_backfill_up_front(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A backfill (which must re-read to resume) refuses a FIFO at once: exit 2, no traceback."""
    fifo = workdir / "traces.fifo"
    os.mkfifo(fifo)
    done = evalq(env, "backfill", str(fifo), timeout_s=30)
    assert done.returncode == 2, done.stderr
    assert "not a regular file" in done.stderr
    assert "Traceback" not in done.stderr
    assert queue_length(redis_url, "evalq.backfill") == 0
    record("backfill: a FIFO", "refused up front: 'not a regular file', exit 2")


def test_pretty_json_piped_to_dev_stdin_is_one_document(
    env: dict[str, str], redis_url: str
) -> None:
    """A pretty-printed document piped to ``/dev/stdin`` is read like the same file on disk."""
    done = evalq(env, "enqueue", "/dev/stdin", stdin=_document(5).encode())
    assert done.returncode == 0, done.stderr
    assert "enqueued 5 snapshot(s); rejected lines: 0" in done.stdout
    assert _sent_ids(redis_url) == [f"t{i}" for i in range(5)]
    record("enqueue /dev/stdin: piped pretty JSON", "one document, 5 sent, 0 rejected")


def test_a_pretty_document_with_one_nan_keeps_the_valid_records(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """One NaN in record 2 of 5: one rejection naming ``[2]``; the other 4 records are sent."""
    text = _document(5).replace('"question 2"', "NaN", 1)
    path = write(workdir / "doc.json", text)
    done = evalq(env, "enqueue", str(path))
    assert done.returncode == 1, done.stderr
    assert "enqueued 4 snapshot(s); rejected lines: 1" in done.stdout
    assert f"{path}:1: [2]: INVALID_JSON" in done.stderr
    assert _sent_ids(redis_url) == ["t0", "t1", "t3", "t4"]
    record("enqueue: pretty document, one NaN", "1 rejection naming [2], 4 sent, exit 1")


def test_a_large_pretty_document_is_parsed_once_with_flat_memory(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A 25 MB pretty document peaks within 25 MiB of its JSONL twin (was ~5x the file size)."""
    count, text_bytes = 2500, 10_000
    doc = write(workdir / "big.json", _document(count, text_bytes=text_bytes))
    lines = "".join(json.dumps(chat_record(i, text="z" * text_bytes)) + "\n" for i in range(count))
    jsonl = write(workdir / "big.jsonl", lines)
    assert doc.stat().st_size > 25_000_000
    backfill_env = {**env, "batch_size": "64"}
    as_jsonl = evalq(backfill_env, "enqueue", str(jsonl), "--lane", "backfill")
    assert as_jsonl.returncode == 0, as_jsonl.stderr
    as_doc = evalq(backfill_env, "enqueue", str(doc), "--lane", "backfill")
    assert as_doc.returncode == 0, as_doc.stderr
    assert f"enqueued {count} snapshot(s); rejected lines: 0" in as_doc.stdout
    assert len(_sent_ids(redis_url, "evalq.backfill")) == 2 * count
    assert as_doc.peak_rss_mib < as_jsonl.peak_rss_mib + 25, (as_doc, as_jsonl)
    record(
        "enqueue: 25 MB pretty document",
        f"peak {as_doc.peak_rss_mib:.0f} MiB vs {as_jsonl.peak_rss_mib:.0f} MiB as JSONL",
    )
