"""PostgreSQL unreachable for longer than the hold, through a real worker: it halts with one line
``STORE_UNAVAILABLE`` and exit 75, acks nothing meanwhile, and once the database is back a
restarted worker records every message once.

PostgreSQL is the machine's shared server, so it is never stopped: the worker reaches it
through the fault suite's TCP proxy (:class:`~tests.faults.fault_kit.TcpProxy`), and the outage
is the proxy refusing connections and resetting the open ones.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis

from producer import Producer
from tests.faults.fault_kit import TcpProxy, evaluations_in
from tests.hostile.hostile_kit import record
from tests.queue.queue_kit import WorkerProcess, example_snapshots, variants, wait_until, worker_env
from worker.halt import EXIT_HALTED
from worker.store import RETRY_TIMEOUT_S, open_store

pytestmark = pytest.mark.services


@pytest.fixture
def fresh_pg(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL database of this test alone, migrated (dropped afterwards)."""
    name = f"evalq_halt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{postgres_url.rpartition('/')[0]}/{name}"
    open_store(url).close()
    try:
        yield url
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _via(proxy: TcpProxy, url: str) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def test_postgres_unreachable_past_the_hold_halts_the_worker(
    fresh_pg: str, redis_url: str, workdir: Path
) -> None:
    """PostgreSQL cut off past the hold: one STORE_UNAVAILABLE line, exit 75, nothing recorded."""
    # Once the database is back, a restart records every message once. The halt comes within
    # the hold and one wait for a pooled connection: the store's own 30 s of retries no longer
    # stack under the hold (it took 30 s after the cut with a 2 s hold).
    target = urlsplit(fresh_pg)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
    env = worker_env(
        broker_url=redis_url,
        store_url=_via(proxy, fresh_pg),
        lanes="live",
        processes="1",
        store_hold_s="2",
        restore_interval_s="1",
    )
    before, after = (variants(example_snapshots()["order-42"], 3, p) for p in ("up", "down"))
    try:
        worker = WorkerProcess(env, workdir / "worker.log")
        try:
            worker.wait_ready(60)
            with Producer(redis_url) as producer:
                for snapshot in before:
                    producer.enqueue(snapshot)
                wait_until(lambda: evaluations_in(fresh_pg) == 3, 30, "the first recorded")
                proxy.cut()
                cut_s = time.monotonic()
                for snapshot in after:
                    producer.enqueue(snapshot)
            code = worker.process.wait(120)
            halted_after_s = time.monotonic() - cut_s
        finally:
            worker.kill_group()
        assert code == EXIT_HALTED, worker.log[-3000:]
        assert worker.log.count("worker halted: STORE_UNAVAILABLE") == 1
        assert halted_after_s < RETRY_TIMEOUT_S
        assert evaluations_in(fresh_pg) == 3  # nothing recorded, so nothing acked
        proxy.restore()
        restarted = WorkerProcess(env, workdir / "restarted.log")
        client = redis.Redis.from_url(redis_url)
        try:
            wait_until(lambda: evaluations_in(fresh_pg) == 6, 60, "every message recorded")
            wait_until(lambda: client.hlen("unacked") == 0, 30, "nothing left unacked")
        finally:
            client.close()
            restarted.stop()
    finally:
        proxy.close()
    record(
        "store: PostgreSQL unreachable past EVALQ_STORE_HOLD_S",
        "one line STORE_UNAVAILABLE, exit 75, nothing acked; back: 6/6 recorded once",
    )


def test_the_supervisor_backs_off_while_postgres_is_down(
    fresh_pg: str, redis_url: str, workdir: Path
) -> None:
    """With PostgreSQL down, supervised restarts that cannot reach the store exit 75, backed off."""
    # Exit 75, not 2: status 2 (invalid configuration) would stop the whole worker.
    # Once the database is back every message is recorded once and the worker serves on.
    target = urlsplit(fresh_pg)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
    env = worker_env(
        broker_url=redis_url,
        store_url=_via(proxy, fresh_pg),
        lanes="live",
        processes="2",
        store_hold_s="2",
        restore_interval_s="1",
    )
    snapshots = variants(example_snapshots()["order-42"], 6, "supervised-down")
    worker = WorkerProcess(env, workdir / "worker.log")
    try:
        wait_until(lambda: worker.log.count(" ready.") >= 2, 60, "both consumers ready")
        proxy.cut()
        with Producer(redis_url) as producer:
            for snapshot in snapshots:
                producer.enqueue(snapshot)
        wait_until(
            lambda: "worker cannot start: store STORE_UNAVAILABLE" in worker.log,
            120,
            "a restart refused by the store",
        )
        assert worker.process.poll() is None
        proxy.restore()
        wait_until(lambda: evaluations_in(fresh_pg) == 6, 90, "every message recorded")
        assert worker.process.poll() is None  # the supervisor serves on
    finally:
        worker.stop()
        proxy.close()
    assert "invalid configuration" not in worker.log
    assert "exited (status 75: halted on a store fault, see its log); restarting in" in worker.log
    record(
        "evalq worker: PostgreSQL down past the hold",
        "consumers halt (75), restarts refused by the store exit 75 and are backed off; "
        "back: 6/6 recorded once",
    )
