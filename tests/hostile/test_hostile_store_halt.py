"""Store faults that outlast the hold, through real worker processes and a real SQLite file: the
worker stops consuming, says why in one line, exits 75, acks nothing more, and after the fix a
restarted worker records every message once.

The faults are real: a database file replaced under the running worker (a consistent copy moved
over it, as a restore from backup would), and a full disk (a small tmpfs filled by the test; it
needs root to mount, else the case is skipped). Counts are read with a fresh connection each
time: a connection opened before the replacement would go on reading the old file.
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from producer import Producer, Snapshot
from tests.conftest import service_missing
from tests.hostile.hostile_kit import record
from tests.queue.queue_kit import WorkerProcess, example_snapshots, variants, wait_until, worker_env
from worker.halt import EXIT_HALTED
from worker.store import open_store

pytestmark = pytest.mark.services

HOLD_S = 3.0


def _evaluations(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        ((count,),) = conn.execute("SELECT COUNT(DISTINCT snapshot_id) FROM evaluations")
        ((rows,),) = conn.execute("SELECT COUNT(*) FROM evaluations")
    assert rows == count  # each snapshot once
    return int(count)


def _env(redis_url: str, path: Path, processes: str = "1", lanes: str = "live") -> dict[str, str]:
    return worker_env(
        broker_url=redis_url,
        store_url=f"sqlite:///{path}",
        lanes=lanes,
        processes=processes,
        store_hold_s=str(HOLD_S),
        restore_interval_s="1",
    )


def _enqueue(redis_url: str, snapshots: list[Snapshot]) -> None:
    with Producer(redis_url) as producer:
        for snapshot in snapshots:
            producer.enqueue(snapshot)


def _replace(path: Path) -> None:
    """A consistent copy of the database moved over it (a new inode at the same path)."""
    copy = path.with_name("restored.db")
    with (
        contextlib.closing(sqlite3.connect(path)) as src,
        contextlib.closing(sqlite3.connect(copy)) as dst,
    ):
        src.backup(dst)
    copy.replace(path)


def _halted(worker: WorkerProcess, timeout_s: float) -> int:
    try:
        return worker.process.wait(timeout_s)
    finally:
        worker.kill_group()


def _recorded_by_a_restart(redis_url: str, env: dict[str, str], path: Path, total: int) -> None:
    worker = WorkerProcess(env, path.parent / "restarted.log")
    client = redis.Redis.from_url(redis_url)
    try:
        wait_until(lambda: _evaluations(path) == total, 90, "every message recorded")
        wait_until(lambda: client.hlen("unacked") == 0, 30, "nothing left unacked")
    finally:
        client.close()
        worker.stop()
    assert _evaluations(path) == total


def test_a_replaced_database_halts_the_worker_at_once(redis_url: str, workdir: Path) -> None:
    """Replaced SQLite file: no hold, one STORE_REPLACED line, exit 75; a restart adds the rest."""
    # Nothing is acked into the old file; the restart records each remaining message once.
    # The worker serves two lanes, so the process has two runtimes: they share one halt.
    path = workdir / "evalq.db"
    open_store(f"sqlite:///{path}").close()
    before, after = (variants(example_snapshots()["order-42"], 5, p) for p in ("before", "after"))
    env = _env(redis_url, path, lanes="live,backfill")
    worker = WorkerProcess(env, workdir / "worker.log")
    try:
        worker.wait_ready(60)
        _enqueue(redis_url, before)
        wait_until(lambda: _evaluations(path) == 5, 30, "the first snapshots recorded")
        _replace(path)
        _enqueue(redis_url, after)
        code = _halted(worker, 60)
    finally:
        worker.kill_group()
    assert code == EXIT_HALTED, worker.log[-3000:]
    assert worker.log.count("worker halted: STORE_REPLACED") == 1
    assert "holding the writes" not in worker.log  # a replaced file never comes back: no hold
    assert "Traceback" not in worker.log
    _recorded_by_a_restart(redis_url, env, path, 10)
    record(
        "SQLite file replaced under a running worker",
        "halt at once: one line STORE_REPLACED, exit 75; after a restart 10/10 recorded once",
    )


def test_the_supervisor_restarts_a_consumer_halted_by_a_replaced_file(
    redis_url: str, workdir: Path
) -> None:
    """A consumer halted by a replaced file is reported (75) and restarted; the worker serves on."""
    # Under ``evalq worker --processes 2``: after the back-off the restarted consumers record
    # every message in the new file, once.
    path = workdir / "evalq.db"
    open_store(f"sqlite:///{path}").close()
    before, after = (variants(example_snapshots()["order-42"], 6, p) for p in ("before", "after"))
    worker = WorkerProcess(_env(redis_url, path, processes="2"), workdir / "worker.log")
    try:
        wait_until(lambda: worker.log.count(" ready.") >= 2, 60, "both consumers ready")
        _enqueue(redis_url, before)
        wait_until(lambda: _evaluations(path) == 6, 30, "the first snapshots recorded")
        _replace(path)
        _enqueue(redis_url, after)
        wait_until(lambda: _evaluations(path) == 12, 90, "the rest recorded in the new file")
        assert worker.process.poll() is None  # the supervisor serves on
    finally:
        worker.stop()
    assert "exited (status 75: halted on a store fault, see its log); restarting in" in worker.log
    assert "worker halted: STORE_REPLACED" in worker.log
    record(
        "evalq worker: a consumer halted by a replaced file",
        "reported (status 75), restarted after back-off; 12/12 recorded once in the new file",
    )


@pytest.fixture
def small_disk(workdir: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of the test's own (skipped where mounting needs privileges we lack)."""
    mount_point = workdir / "disk"
    mount_point.mkdir()
    argv = ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)]
    if subprocess.run(argv, capture_output=True, check=False).returncode != 0:
        service_missing("a small tmpfs", "mounting one needs root (CAP_SYS_ADMIN)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    # Unbuffered: nothing is left to flush when the file closes on a full disk.
    full = pytest.raises(OSError, match="No space left")
    with filler.open("wb", buffering=0) as out, full as caught:
        for _ in range(1024):  # 64 MiB at most: the 16 MiB disk is full long before
            out.write(b"\0" * 65536)
    assert caught.value.errno == errno.ENOSPC
    return filler


def test_a_full_disk_past_the_hold_halts_the_worker(redis_url: str, small_disk: Path) -> None:
    """A full disk: writes held for EVALQ_STORE_HOLD_S, then one STORE_FULL line and exit 75."""
    # The hold backs off and acks nothing; after freeing space a restart records each message once.
    path = small_disk / "evalq.db"
    open_store(f"sqlite:///{path}").close()
    before, after = (variants(example_snapshots()["order-42"], 3, p) for p in ("room", "full"))
    env = _env(redis_url, path)
    worker = WorkerProcess(env, small_disk.parent / "worker.log")
    try:
        worker.wait_ready(60)
        _enqueue(redis_url, before)
        wait_until(lambda: _evaluations(path) == 3, 30, "the first snapshots recorded")
        filler = _fill(small_disk)
        _enqueue(redis_url, after)
        code = _halted(worker, 60 + HOLD_S)
    finally:
        worker.kill_group()
    assert code == EXIT_HALTED, worker.log[-3000:]
    assert worker.log.count("worker halted: STORE_FULL") == 1
    assert "store unavailable (STORE_FULL); holding the writes" in worker.log
    assert "INTERNAL_ERROR" not in worker.log  # transient: never a dead letter
    filler.unlink()
    _recorded_by_a_restart(redis_url, env, path, 6)
    record(
        "disk full past EVALQ_STORE_HOLD_S",
        "writes held with back-off, then one line STORE_FULL, exit 75; freed: 6/6 recorded once",
    )
