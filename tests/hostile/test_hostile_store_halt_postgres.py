"""PostgreSQL unreachable for longer than the hold, through a real worker: it halts with one line
``STORE_UNAVAILABLE`` and exit 75, acks nothing meanwhile, and once the database is back a
restarted worker records every message once.

PostgreSQL is the machine's shared server, so it is never stopped: the worker reaches it
through the fault suite's TCP proxy (:class:`~tests.faults.fault_kit.TcpProxy`), and the outage
is the proxy refusing connections and resetting the open ones.
"""

from __future__ import annotations

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
from worker.store import open_store

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
    """The store cut off longer than EVALQ_STORE_HOLD_S: one line STORE_UNAVAILABLE, exit 75,
    nothing recorded meanwhile; the database back, a restart records every message once."""
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
                for snapshot in after:
                    producer.enqueue(snapshot)
            code = worker.process.wait(120)
        finally:
            worker.kill_group()
        assert code == EXIT_HALTED, worker.log[-3000:]
        assert worker.log.count("worker halted: STORE_UNAVAILABLE") == 1
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
