"""The ``evalq`` command line as a user runs it: subprocesses, real services, no EVALQ_* leaks."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from producer import LANE_QUEUES, Lane
from tests.cli.cli_kit import evalq, evalq_command
from tests.queue.queue_kit import EXAMPLES, WorkerProcess, wait_until, worker_env
from worker.store import Store

pytestmark = pytest.mark.services


def test_run_on_a_fresh_directory_with_nothing_configured(workdir: Path) -> None:
    """`evalq run examples/traces.jsonl` with no EVALQ_* set evaluates every trace, SYNTHETIC."""
    done = evalq("run", str(EXAMPLES), "--timeout-s", "60", cwd=workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Judge: SYNTHETIC" in done.stdout
    assert "snapshots: 6  evaluated: 6" in done.stdout
    assert "uncalibrated demo values" in done.stdout
    assert str(workdir / "evalq.db") in done.stdout.replace("\n", "")

    report = evalq("report", "--json", cwd=workdir)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert (data["snapshots"], data["evaluations"]) == (6, 6)
    assert set(data["metrics"]) == {
        "tool_choice",
        "used_tool_result",
        "grounded",
        "stayed_in_scope",
        "answer_relevancy",
        "completeness",
        "indirect_injection",
        "tool_execution",
    }
    grounded = data["metrics"]["grounded"]
    assert sum(grounded["by_status"].values()) == 6
    assert grounded["by_reason"]["INCOMPLETE_TRACE"] == 1  # the truncated trace


def test_worker_and_enqueue_refuse_missing_or_invalid_configuration(workdir: Path) -> None:
    """Bad configuration exits 2 with a message naming the variable (and never its value)."""
    no_broker = evalq("worker", cwd=workdir)
    assert no_broker.returncode == 2
    assert "EVALQ_BROKER_URL" in no_broker.stderr

    bad = evalq(
        "enqueue",
        str(EXAMPLES),
        cwd=workdir,
        broker_url="redis://127.0.0.1:1/0",
        thresholds="0.9,0.1",
    )
    assert bad.returncode == 2
    assert "EVALQ_THRESHOLDS" in bad.stderr

    secret = "sk-should-never-be-printed"
    keyed = evalq("enqueue", str(EXAMPLES), cwd=workdir, judge="systemone", judge_api_key=secret)
    assert keyed.returncode == 2
    assert "EVALQ_THRESHOLDS" in keyed.stderr
    assert secret not in keyed.stderr + keyed.stdout


def test_enqueue_backfill_batches_on_the_backfill_queue(redis_url: str, workdir: Path) -> None:
    """`evalq enqueue --lane backfill` packs EVALQ_BATCH_SIZE snapshots per JSON message."""
    done = evalq(
        "enqueue",
        str(EXAMPLES),
        "--lane",
        "backfill",
        cwd=workdir,
        broker_url=redis_url,
        batch_size="4",
    )
    assert done.returncode == 0, done.stderr
    assert "enqueued 6 snapshot(s)" in done.stdout
    client = redis.Redis.from_url(redis_url)
    messages = [json.loads(m) for m in client.lrange(LANE_QUEUES[Lane.BACKFILL], 0, -1)]
    assert client.llen(LANE_QUEUES[Lane.LIVE]) == 0
    assert [m["headers"]["task"] for m in messages] == ["evalq.evaluate"] * 2
    assert all(m["content-type"] == "application/json" for m in messages)
    assert all("snapshots" in m["headers"]["argsrepr"] for m in messages)  # no content


def test_worker_command_serves_every_lane_and_outcome_flags(
    redis_url: str,
    workdir: Path,
    store_url: str,
    store: Store,
) -> None:
    """`evalq worker` (no lane flags) serves live, backfill and outcomes; `evalq outcome` links."""
    env = {"broker_url": redis_url, "store_url": store_url, "batch_size": "4"}
    worker = WorkerProcess(worker_env(**env), workdir / "worker.log", [*evalq_command(), "worker"])
    try:
        worker.wait_ready()
        enqueued = evalq("enqueue", str(EXAMPLES), "--lane", "backfill", cwd=workdir, settings=env)
        assert enqueued.returncode == 0, enqueued.stderr
        sent = evalq(
            "outcome",
            "--event-id",
            "ev-1",
            "--trace-id",
            "order-42",
            "--name",
            "refund_reversed",
            "--value",
            '{"amount": 12.5}',
            cwd=workdir,
            settings=env,
        )
        assert sent.returncode == 0, sent.stderr
        wait_until(lambda: store.count_evaluations() == 6, 30, "six evaluations")
        order = next(r for r in store.iter_results() if r.trace_id == "order-42")
        wait_until(lambda: bool(store.links_for_evaluation(order.evaluation_id)), 20, "the link")
        (link,) = store.links_for_evaluation(order.evaluation_id)
        assert link.outcome.value == {"amount": 12.5}
        report = json.loads(evalq("report", "--json", cwd=workdir, settings=env).stdout)
        assert report["evaluations"] == 6
    finally:
        worker.stop()


def _started_run(workdir: Path, *args: str) -> subprocess.Popen[str]:
    """`evalq run examples/traces.jsonl ARGS` with its temporary files under ``workdir/tmp``."""
    (workdir / "tmp").mkdir()
    env = worker_env() | {"TMPDIR": str(workdir / "tmp")}
    return subprocess.Popen(
        [*evalq_command(), "run", str(EXAMPLES), *args],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_in_run_prints_a_summary_and_removes_its_temporary_directory(
    workdir: Path,
) -> None:
    """SIGINT while waiting: exit 130, what was done and where the records are; no evalq-run-*."""
    running = _started_run(workdir, "--no-worker", "--timeout-s", "60")
    try:
        wait_until(lambda: any((workdir / "tmp").glob("evalq-run-*/redis")), 30, "the run")
        time.sleep(1.0)  # usually enqueued and waiting by now; enqueuing ("of ?") is fine too
        running.send_signal(signal.SIGINT)
        _, stderr = running.communicate(timeout=30)
    finally:
        running.kill()
    assert running.returncode == 130, stderr
    said = " ".join(stderr.split())
    assert re.search(r"interrupted: 0 of (6|\?) snapshot\(s\) evaluated, 0 dead-lettered", said), (
        stderr
    )
    assert f"the records so far are in {(workdir / 'evalq.db').resolve()}" in said
    assert list((workdir / "tmp").iterdir()) == []


def test_run_no_worker_explains_its_timeout(workdir: Path) -> None:
    """`run --no-worker` with nothing consuming: exit 1 and a message saying a worker is needed."""
    running = _started_run(workdir, "--no-worker", "--timeout-s", "2")
    _, stderr = running.communicate(timeout=60)
    assert running.returncode == 1
    said = " ".join(stderr.split())
    assert "with --no-worker the snapshots wait for a running worker" in said, stderr
    assert "start `evalq worker` on this broker and store" in said
