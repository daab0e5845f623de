"""Inputs that change under a backfill, and outcome event ids reused with other content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.hostile_kit import chat_line, evalq, record, write
from tests.producer.producer_kit import queue_length, queued_payloads

pytestmark = pytest.mark.services


def test_resume_after_lines_were_prepended_is_refused(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """A resume of a file that changed (lines prepended) refuses, naming it; nothing is sent."""
    path = write(workdir / "t.jsonl", "".join(chat_line(i) for i in range(4)))
    first = evalq({**env, "batch_size": "2"}, "backfill", str(path), "--id", "changed")
    assert first.returncode == 0, first.stderr
    queued = queue_length(redis_url, "evalq.backfill")
    write(path, chat_line(100) + chat_line(101) + path.read_text())
    again = evalq(env, "backfill", str(path), "--resume", "changed")
    assert again.returncode == 2, again.stderr
    assert "INPUT_CHANGED" in again.stderr
    assert str(path) in again.stderr.replace("\n", "")
    assert "without --resume" in again.stderr
    assert queue_length(redis_url, "evalq.backfill") == queued
    record("backfill --resume after lines prepended", "refused (INPUT_CHANGED, exit 2), 0 sent")


def test_an_outcome_event_id_reused_with_other_content_is_reported(
    workdir: Path, env: dict[str, str], redis_url: str
) -> None:
    """The same event id with a different value is EVENT_ID_CONFLICT (not sent); exit 1."""
    base = {"trace_id": "t1", "name": "refund", "observed_at": "2025-01-02T03:04:05Z"}
    lines = [{**base, "event_id": "e1", "value": v} for v in (1, 2, 1)]
    path = write(workdir / "o.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    done = evalq(env, "outcome", str(path))
    assert done.returncode == 1, done.stderr
    assert "sent 2 outcome event(s); rejected lines: 1" in done.stdout
    assert f"{path}:2: event_id: EVENT_ID_CONFLICT" in done.stderr
    sent = [args[0]["value"] for args in queued_payloads(redis_url, "evalq.outcomes")]
    assert sent == [1, 1]  # the repeat is harmless (the worker keeps one); the conflict is not sent
    record("outcome: same event_id, other value", "EVENT_ID_CONFLICT file:2, not sent, exit 1")
