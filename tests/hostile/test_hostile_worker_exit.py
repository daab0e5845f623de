"""A crashed consumer exits non-zero, through real worker processes: its start failing, an
exception escaping Celery's consumer, and the supervisor's bounded restarts with back-off.

The crash at run time is a real condition an operator can cause: Redis's ``unacked`` key
holding a string instead of kombu's hash, so the reliable fetch fails (a ``ResponseError``,
which Celery's consumer does not recover from). The fetch refuses before popping anything, so
the messages stay queued and a worker started after the fix records each once.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

import pytest
import redis

from producer import Lane, Producer
from producer.snapshot import LANE_QUEUES
from tests.hostile.hostile_kit import record
from tests.queue.queue_kit import WorkerProcess, example_snapshots, variants, wait_until, worker_env
from worker.store import Store
from worker.supervisor import MAX_RESTARTS, restart_delay_s

pytestmark = pytest.mark.services

LIVE = LANE_QUEUES[Lane.LIVE]
SNAPSHOTS = 5
WORKER_COMMAND = [sys.executable, "-m", "worker.cli", "worker"]


def _env(redis_url: str, store_url: str, **extra: str) -> dict[str, str]:
    return worker_env(broker_url=redis_url, store_url=store_url, lanes="live", **extra)


def _ended(worker: WorkerProcess, timeout_s: float) -> int:
    """The worker's exit status (it must end by itself within ``timeout_s``)."""
    try:
        return worker.process.wait(timeout_s)
    finally:
        worker.kill_group()


def _queued_with_a_broken_registry(redis_url: str, prefix: str) -> redis.Redis:
    client = redis.Redis.from_url(redis_url)
    client.set("unacked", "not a hash")
    with Producer(redis_url) as producer:
        for snapshot in variants(example_snapshots()["order-42"], SNAPSHOTS, prefix):
            producer.enqueue(snapshot)
    return client


def _recorded_after_the_fix(
    client: redis.Redis, store: Store, env: dict[str, str], log: Path
) -> None:
    client.delete("unacked")
    worker = WorkerProcess(env, log)
    try:
        wait_until(lambda: store.count_evaluations() == SNAPSHOTS, 60, "every snapshot recorded")
        wait_until(lambda: client.hlen("unacked") == 0, 30, "nothing left unacked")
    finally:
        worker.stop()
    assert store.count_snapshots() == SNAPSHOTS


def test_a_consumer_that_cannot_start_exits_1_with_one_line(
    redis_url: str, store_url: str, workdir: Path
) -> None:
    """A failing lifecycle step (metrics port taken): exit 1, one line naming the error's class."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        env = _env(redis_url, store_url, processes="1", metrics_port=port)
        worker = WorkerProcess(env, workdir / "worker.log")
        code = _ended(worker, 60)
    assert code == 1, worker.log[-2000:]
    assert worker.log.count("worker cannot start: OSError") == 1
    assert "Traceback" not in worker.log
    record("consumer cannot start (metrics port taken)", "exit 1, one line: cannot start: OSError")


def test_a_consumer_crash_exits_1_and_loses_nothing(
    redis_url: str, store_url: str, store: Store, workdir: Path
) -> None:
    """An exception escaping Celery's consumer exits 1; its messages stay queued, none lost."""
    # Such a crash used to exit 0; a worker started after the fix records each message once.
    client = _queued_with_a_broken_registry(redis_url, "crash")
    try:
        env = _env(redis_url, store_url, processes="1")
        worker = WorkerProcess(env, workdir / "worker.log")
        code = _ended(worker, 60)
        assert code == 1, worker.log[-2000:]
        assert "Unrecoverable error" in worker.log
        assert client.llen(LIVE) == SNAPSHOTS  # nothing taken off the queue, nothing lost
        _recorded_after_the_fix(client, store, env, workdir / "after.log")
    finally:
        client.close()
    record(
        "consumer crash at run time (Redis 'unacked' of the wrong type)",
        f"exit 1, messages stay queued; after the fix {SNAPSHOTS}/{SNAPSHOTS} recorded once",
    )


def test_the_supervisor_restarts_with_back_off_then_gives_up_non_zero(
    redis_url: str, store_url: str, store: Store, workdir: Path
) -> None:
    """Consumers crashing on every start restart after doubling waits, then the worker exits 1."""
    # Past MAX_RESTARTS in the window it gives up; a worker started after the fix records all once.
    client = _queued_with_a_broken_registry(redis_url, "supervised")
    try:
        env = _env(redis_url, store_url, processes="2")
        worker = WorkerProcess(env, workdir / "worker.log", WORKER_COMMAND)
        code = _ended(worker, 120)
        assert code == 1, worker.log[-3000:]
        waits = [
            float(w)
            for w in re.findall(r"exited \(status 1\); restarting in ([\d.]+) s", worker.log)
        ]
        assert waits == [restart_delay_s(n) for n in range(1, MAX_RESTARTS + 1)]
        assert worker.log.count("giving up, stopping") == 1
        _recorded_after_the_fix(client, store, env, workdir / "after.log")
    finally:
        client.close()
    record(
        "evalq worker: consumers crash on every start",
        f"restarted after {', '.join(f'{restart_delay_s(n):g}' for n in range(1, 6))} s, "
        f"then exit 1 'giving up'",
    )
