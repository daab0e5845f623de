"""`evalq backfill` and `evalq outcome` as a user runs them: exit codes and messages."""

from __future__ import annotations

import json
import math
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cli.cli_kit import evalq, evalq_command
from tests.producer.producer_kit import queue_length, queued_payloads, write_lines
from tests.queue.queue_kit import REPO, wait_until, worker_env
from worker.store import Store

pytestmark = pytest.mark.services


def _outcome(event_id: str) -> str:
    event = {"event_id": event_id, "trace_id": "t1", "name": "refund_reversed", "value": 1}
    return json.dumps({**event, "observed_at": "2025-01-02T03:04:05Z"}) + "\n"


def test_outcome_file_sends_valid_lines_and_names_each_bad_one(
    workdir: Path, redis_url: str, store_url: str
) -> None:
    """Bad lines are reported as file:line: field: CODE; the others are sent; exit status 1."""
    path = workdir / "outcomes.jsonl"
    bad_time = _outcome("o3").replace("2025-01-02T03:04:05Z", "yesterday")
    path.write_text(_outcome("o1") + "{not json\n" + bad_time + _outcome("o4"))
    done = evalq("outcome", str(path), broker_url=redis_url, store_url=store_url)
    assert done.returncode == 1
    assert "sent 2 outcome event(s); rejected lines: 2" in done.stdout
    assert f"{path}:2: $: INVALID_JSON" in done.stderr
    assert f"{path}:3: observed_at: INVALID_FIELD" in done.stderr
    sent = [args[0]["event_id"] for args in queued_payloads(redis_url, "evalq.outcomes")]
    assert sorted(sent) == ["o1", "o4"]


def test_outcome_refuses_a_file_and_event_flags_together(
    workdir: Path, redis_url: str, store_url: str
) -> None:
    """FILE and --event-id together are ambiguous: exit status 2 and nothing is sent."""
    path = workdir / "outcomes.jsonl"
    path.write_text(_outcome("o1"))
    env = {"broker_url": redis_url, "store_url": store_url}
    done = evalq("outcome", str(path), "--event-id", "x", settings=env)
    assert done.returncode == 2
    assert queue_length(redis_url, "evalq.outcomes") == 0


def test_backfill_with_bad_lines_reports_them_and_exits_1(
    workdir: Path, redis_url: str, store_url: str
) -> None:
    """A rejected line is named (file, line, field); the rest is enqueued; exit status 1."""
    path = workdir / "traces.jsonl"
    bad = write_lines(path, 30, bad_every=10)
    env = {"broker_url": redis_url, "store_url": store_url, "batch_size": "5"}
    done = evalq("backfill", str(path), "--id", "bad-lines", settings=env)
    assert done.returncode == 1
    assert f"enqueued {30 - bad}," in done.stdout
    assert f"rejected lines {bad}," in done.stdout
    assert f"{path.resolve()}:10: " in done.stderr
    assert queue_length(redis_url, "evalq.backfill") == math.ceil((30 - bad) / 5)  # per message


def test_backfill_resume_of_an_unknown_id_is_refused(
    workdir: Path, redis_url: str, store_url: str
) -> None:
    """--resume with an id that has no checkpoints for these paths: exit 2, nothing enqueued."""
    path = workdir / "traces.jsonl"
    write_lines(path, 5)
    env = {"broker_url": redis_url, "store_url": store_url}
    done = evalq("backfill", str(path), "--resume", "never-ran", settings=env)
    assert done.returncode == 2
    assert "UNKNOWN_BACKFILL" in done.stderr
    assert queue_length(redis_url, "evalq.backfill") == 0


@pytest.mark.parametrize(
    ("signum", "said"), [(signal.SIGTERM, "terminated"), (signal.SIGINT, "interrupted")]
)
def test_sigterm_stops_a_backfill_and_prints_how_to_resume(
    workdir: Path, redis_url: str, store_url: str, store: Store, signum: int, said: str
) -> None:
    """SIGTERM (Ctrl-C) mid-run: exit 143 (130), --resume <id> on stderr; a resume finishes it."""
    path = workdir / "traces.jsonl"
    # 10 s of input at this rate: the SIGTERM sent at the first checkpoint must land mid-run
    # even on a loaded machine (with 2 s of input it once arrived after the last line).
    write_lines(path, 2000)
    env = {"broker_url": redis_url, "store_url": store_url}
    args = ["backfill", str(path), "--batch-size", "20", "--rate", "200"]
    running = subprocess.Popen(
        [*evalq_command(), *args, "--id", "term"],
        env=worker_env(**env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        source = str(path.resolve())
        wait_until(lambda: store.latest_checkpoint("term", source) is not None, 30, "a checkpoint")
        running.send_signal(signum)
        _, stderr = running.communicate(timeout=30)
    finally:
        running.kill()
    assert running.returncode == 128 + signum, stderr[-3000:]
    assert f"{said}; continue with --resume term" in stderr
    resumed = evalq(*args[:2], "--resume", "term", settings=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "read 2000," in resumed.stdout
    assert "already sent 0," not in resumed.stdout


def test_outcome_event_flags_have_environment_twins(redis_url: str, store_url: str) -> None:
    """EVALQ_OUTCOME_EVENT_ID, _TRACE_ID, _NAME, _VALUE, _OBSERVED_AT stand in for the flags."""
    twins = {
        "outcome_event_id": "ev-env",
        "outcome_trace_id": "t-env",
        "outcome_name": "refund_reversed",
        "outcome_value": '{"amount": 3}',
        "outcome_observed_at": "2025-01-02T03:04:05Z",
    }
    done = evalq("outcome", settings={**twins, "broker_url": redis_url, "store_url": store_url})
    assert done.returncode == 0, done.stderr
    assert "sent 1 outcome event" in done.stdout
    (sent,) = [args[0] for args in queued_payloads(redis_url, "evalq.outcomes")]
    assert (sent["event_id"], sent["trace_id"], sent["value"]) == ("ev-env", "t-env", {"amount": 3})


def test_resume_of_a_mistyped_derived_id_is_unknown_not_a_mismatch(
    workdir: Path, redis_url: str, store_url: str
) -> None:
    """--resume bf-… that never ran: UNKNOWN_BACKFILL (exit 2), not BACKFILL_MISMATCH."""
    path = workdir / "traces.jsonl"
    write_lines(path, 5)
    env = {"broker_url": redis_url, "store_url": store_url}
    done = evalq("backfill", str(path), "--resume", "bf-0000000000000000", settings=env)
    assert done.returncode == 2
    assert "UNKNOWN_BACKFILL" in done.stderr
    assert "BACKFILL_MISMATCH" not in done.stderr
    assert queue_length(redis_url, "evalq.backfill") == 0


def test_an_empty_input_file_says_so(workdir: Path, redis_url: str, store_url: str) -> None:
    """enqueue, backfill and outcome of an empty file: 'no … in FILE: nothing to …', exit 0."""
    empty = workdir / "empty.jsonl"
    empty.write_text("")
    env = {"broker_url": redis_url, "store_url": store_url}
    for argv, said in [
        (["enqueue", str(empty)], f"no traces in {empty}: nothing to enqueue"),
        (["backfill", str(empty)], f"no traces in {empty}: nothing to enqueue"),
        (["outcome", str(empty)], f"no outcome events in {empty}: nothing to send"),
    ]:
        done = evalq(*argv, settings=env)
        assert done.returncode == 0, (argv, done.stderr)
        assert said in " ".join(done.stderr.split()), (argv, done.stderr)
