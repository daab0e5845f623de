"""An unreachable broker: one line naming the setting, exit status 1, no traceback, fast."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.hostile.hostile_kit import chat_line, evalq, record, write
from worker.embedded import free_port

pytestmark = pytest.mark.services


@pytest.fixture
def dead_env(store_url: str) -> dict[str, str]:
    """Settings whose broker is a loopback port nothing listens on."""
    return {"broker_url": f"redis://127.0.0.1:{free_port()}/0", "store_url": store_url}


def _one_line_failure(done_stderr: str) -> list[str]:
    lines = [line for line in done_stderr.splitlines() if line.strip()]
    assert "Traceback" not in done_stderr
    assert len(lines) == 1, done_stderr
    assert "broker unreachable (EVALQ_BROKER_URL): BROKER_UNREACHABLE" in lines[0]
    return lines


def test_enqueue_with_an_unreachable_broker_fails_fast_in_one_line(
    workdir: Path, dead_env: dict[str, str]
) -> None:
    """``evalq enqueue``: exit 1 within seconds, one line, no traceback, no URL printed."""
    path = write(workdir / "t.jsonl", chat_line(1))
    started = time.monotonic()
    done = evalq(dead_env, "enqueue", str(path))
    elapsed_s = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    _one_line_failure(done.stderr)
    assert dead_env["broker_url"] not in done.stderr
    assert elapsed_s < 15
    record("enqueue: broker unreachable", f"1 line, exit 1, {elapsed_s:.1f} s")


def test_backfill_with_an_unreachable_broker_names_what_to_do(
    workdir: Path, dead_env: dict[str, str]
) -> None:
    """``evalq backfill``: exit 1, one line naming the backfill id, nothing checkpointed."""
    path = write(workdir / "t.jsonl", chat_line(1))
    done = evalq(dead_env, "backfill", str(path), "--id", "down")
    assert done.returncode == 1, done.stderr
    (line,) = _one_line_failure(done.stderr)
    assert "backfill down" in line
    record("backfill: broker unreachable", "1 line naming backfill 'down', exit 1")


def test_outcome_with_an_unreachable_broker_fails_fast_in_one_line(
    workdir: Path, dead_env: dict[str, str]
) -> None:
    """``evalq outcome FILE``: exit 1, one line, no traceback."""
    event = {"event_id": "e", "trace_id": "t", "name": "n", "observed_at": "2025-01-02T03:04:05Z"}
    path = write(workdir / "o.jsonl", json.dumps(event) + "\n")
    done = evalq(dead_env, "outcome", str(path))
    assert done.returncode == 1, done.stderr
    _one_line_failure(done.stderr)
    record("outcome: broker unreachable", "1 line, exit 1")
