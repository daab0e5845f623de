"""Values nested past the serializer's depth limit: one rejection each, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.hostile_kit import chat_line, deep_chat_line, evalq, record, write
from tests.producer.producer_kit import queue_length, queued_payloads

pytestmark = pytest.mark.services


def test_deep_line_in_enqueue_is_one_rejection_and_the_rest_is_sent(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A 300-deep tool argument on line 2 is rejected by file and line; lines 1 and 3 are sent."""
    path = write(workdir / "t.jsonl", chat_line(1) + deep_chat_line(2) + chat_line(3))
    done = evalq(env, "enqueue", str(path))
    assert done.returncode == 1, done.stderr
    assert "enqueued 2 snapshot(s); rejected lines: 1" in done.stdout
    assert f"{path}:2: $: JSON_TOO_DEEP" in done.stderr
    assert "Traceback" not in done.stderr
    assert queue_length(redis_url, "evalq.live") == 2
    record("enqueue: 300-deep tool arguments", "1 rejection file:2 JSON_TOO_DEEP, 2 sent, exit 1")


def test_deep_line_in_backfill_does_not_stop_the_file_or_the_next_files(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """The deep line is one rejection; the rest of its file and the next file are enqueued."""
    first = write(workdir / "a.jsonl", chat_line(1) + deep_chat_line(2) + chat_line(3))
    second = write(workdir / "b.jsonl", chat_line(4) + chat_line(5))
    done = evalq({**env, "batch_size": "10"}, "backfill", str(first), str(second), "--id", "deep")
    assert done.returncode == 1, done.stderr
    assert "enqueued 4," in done.stdout
    assert "rejected lines 1," in done.stdout
    assert f"{first}:2: $: JSON_TOO_DEEP" in done.stderr
    assert "Traceback" not in done.stderr
    sent = [s["trace_id"] for args in queued_payloads(redis_url, "evalq.backfill") for s in args[0]]
    assert sorted(sent) == ["t1", "t3", "t4", "t5"]
    record(
        "backfill: 300-deep line, then more files", "1 rejection, 4 sent, next file read, exit 1"
    )


def test_deep_outcome_value_flag_is_refused_with_a_message(
    env: dict[str, str], redis_url: str
) -> None:
    """``outcome --value`` 300 lists deep: exit 2 naming --value, nothing sent, no traceback."""
    deep = "[" * 300 + "]" * 300
    args = ("outcome", "--event-id", "e1", "--trace-id", "t1", "--name", "n", "--value", deep)
    done = evalq(env, *args)
    assert done.returncode == 2, done.stderr
    assert "--value: JSON_TOO_DEEP" in done.stderr
    assert "Traceback" not in done.stderr
    assert queue_length(redis_url, "evalq.outcomes") == 0
    record("outcome --value 300-deep", "exit 2 '--value: JSON_TOO_DEEP', nothing sent")


def test_deep_outcome_line_is_one_rejection(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A 300-deep value on one outcome line is rejected by line; the other lines are sent."""
    lines = []
    for i, value in enumerate([1, json.loads("[" * 250 + "]" * 250), 3], start=1):
        event = {"event_id": f"o{i}", "trace_id": "t", "name": "n", "value": value}
        lines.append(json.dumps({**event, "observed_at": "2025-01-02T03:04:05Z"}))
    lines[1] = lines[1].replace("[" * 250, "[" * 300).replace("]" * 250, "]" * 300)
    path = write(workdir / "outcomes.jsonl", "\n".join(lines) + "\n")
    done = evalq(env, "outcome", str(path))
    assert done.returncode == 1, done.stderr
    assert "sent 2 outcome event(s); rejected lines: 1" in done.stdout
    assert f"{path}:2: " in done.stderr
    assert "Traceback" not in done.stderr
    sent = [args[0]["event_id"] for args in queued_payloads(redis_url, "evalq.outcomes")]
    assert sorted(sent) == ["o1", "o3"]
    record("outcome file: 300-deep value", "1 rejection file:2, 2 sent, exit 1")


def test_deep_line_in_run_is_one_rejection_and_the_rest_is_evaluated(
    workdir: Path, store_url: str
) -> None:
    """``evalq run``: the deep line is listed, the other line is evaluated, exit status 1."""
    path = write(workdir / "t.jsonl", deep_chat_line(1) + chat_line(2))
    done = evalq({"store_url": store_url}, "run", str(path), "--timeout-s", "60", timeout_s=90)
    assert done.returncode == 1, done.stderr
    assert "evaluated: 1" in done.stdout
    assert "rejected lines: 1" in done.stdout
    assert f"{path}:1: $: JSON_TOO_DEEP" in done.stderr
    assert "Traceback" not in done.stderr
    record("run: 300-deep line", "1 rejection listed, the other evaluated, exit 1")
