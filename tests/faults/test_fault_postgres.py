"""The store goes away: PostgreSQL unreachable while workers run; a write that fails half-way.

PostgreSQL is the machine's shared server, so it is never stopped: the workers reach it through
a TCP proxy of the test's own on loopback (:class:`~tests.faults.fault_kit.TcpProxy`), and the
outage is the proxy refusing connections and resetting the open ones. Counting reads go to the
database directly.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from producer import Lane, Producer
from tests.faults.conftest import StartWorker
from tests.faults.fault_kit import (
    AGENT_METRICS,
    SOAK,
    TcpProxy,
    backfill_knobs,
    evaluated_at_least,
    evaluations_in,
    redone,
    report_row,
    store_rows,
    tally,
    wait_drained,
)
from tests.queue.queue_kit import example_snapshots, variants, wait_until
from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.judges.testing import JudgeServer
from worker.store import Store, open_store
from worker.store._backends import SqliteBackend, Tx
from worker.store._turns import Turn

pytestmark = pytest.mark.services

OUTAGE_S = 30.0 if SOAK else 8.0
OUTAGE_N = 2_000 if SOAK else 600


@pytest.fixture
def fresh_pg(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL database of this test alone, its schema created (dropped afterwards)."""
    name = f"evalq_fault_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{postgres_url.rpartition('/')[0]}/{name}"
    open_store(url).close()  # migrate once, so workers start on a ready schema
    try:
        yield url
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _via(proxy: TcpProxy, url: str) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.mark.timeout(1800 if SOAK else 240)
def test_postgres_unreachable_while_workers_run(
    fresh_pg: str,
    redis_url: str,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """The store vanishes for a while mid-run: nothing recorded meanwhile, nothing lost after."""
    target = urlsplit(fresh_pg)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
    try:
        judge_server.latency_ms = 20
        knobs = backfill_knobs(redis_url, _via(proxy, fresh_pg), judge_server, 5)
        workers = [start_worker(**knobs), start_worker(**knobs)]
        base = example_snapshots()["order-42"]
        live = variants(base, OUTAGE_N // 2, "pg-live")
        backfill = variants(base, OUTAGE_N - OUTAGE_N // 2, "pg-backfill")
        producer = producer_for(redis_url, batch_size="5")
        producer.enqueue_many(live, lane=Lane.LIVE)
        producer.enqueue_many(backfill, lane=Lane.BACKFILL, batch_size=5)

        wait_until(evaluated_at_least(fresh_pg, OUTAGE_N // 5), 60, "a fifth evaluated")
        proxy.cut()
        time.sleep(1.0)  # a commit already on the wire when the cut came may still land
        during = evaluations_in(fresh_pg)
        time.sleep(OUTAGE_S - 1.0)
        assert evaluations_in(fresh_pg) == during, "nothing can be recorded while cut off"
        assert during < OUTAGE_N
        assert all(w.process.poll() is None for w in workers), "workers outlive the outage"
        proxy.restore()

        wait_until(evaluated_at_least(fresh_pg, OUTAGE_N), 180, "every evaluation")
        wait_drained(redis_url, 60)
        counts = tally(fresh_pg, [s.snapshot_id for s in (*live, *backfill)], AGENT_METRICS)
        scenario = f"PostgreSQL unreachable {OUTAGE_S:g} s, {OUTAGE_N}"
        row = report_row(counts.counts(scenario, redone(judge_server.count, fresh_pg, workers)))
    finally:
        proxy.close()
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert row.recorded == OUTAGE_N
    assert store_rows(fresh_pg, "SELECT COUNT(*) FROM dead_letters") == [(0,)]


# A trigger of the test's own fires on the first metric-result insert of a transaction, i.e.
# after that transaction inserted its evaluation row. A sequence counts the firings because it
# is not transactional: a rolled-back attempt still consumes its number.
_INJECTED_FAILURES = 4
"""Write attempts the trigger below fails (two dead connections, two serialization failures)."""
_HALF_WAY_TRIGGER = """
CREATE SEQUENCE fault_firings;
CREATE FUNCTION fault_half_way() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n bigint := nextval('fault_firings');
BEGIN
    IF n <= 2 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());  -- the connection dies mid-transaction
    ELSIF n <= 4 THEN
        RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER fault_half_way BEFORE INSERT ON metric_results
    FOR EACH ROW EXECUTE FUNCTION fault_half_way();
"""


def test_postgres_write_failing_half_way_is_rolled_back_and_retried(
    fresh_pg: str,
    redis_url: str,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """Evaluation row in, then the result insert fails: rollback, retry, one complete record."""
    with psycopg.connect(fresh_pg, autocommit=True) as conn:
        conn.execute(_HALF_WAY_TRIGGER)
    worker = start_worker(**backfill_knobs(redis_url, fresh_pg, judge_server, 5))
    snapshots = variants(example_snapshots()["order-42"], 30, "half-way")
    producer_for(redis_url).enqueue_many(snapshots, lane=Lane.LIVE)

    wait_until(evaluated_at_least(fresh_pg, len(snapshots)), 60, "every evaluation")
    wait_drained(redis_url, 30)
    ((firings,),) = store_rows(fresh_pg, "SELECT last_value FROM fault_firings")
    counts = tally(fresh_pg, [s.snapshot_id for s in snapshots], AGENT_METRICS)
    # Each injected failure aborted one write attempt that was then retried from the start.
    extra = redone(judge_server.count, fresh_pg, [worker]) + _INJECTED_FAILURES
    row = report_row(counts.counts("PostgreSQL write fails half-way (4x)", extra))
    assert int(str(firings)) > _INJECTED_FAILURES, "every injected failure must have fired"
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert row.recorded == len(snapshots)
    assert store_rows(fresh_pg, "SELECT COUNT(*) FROM dead_letters") == [(0,)]


# --- SQLite: the same rollback, injected at the store's transaction seam ------------------------


@dataclass
class _Faults:
    """How many metric-result inserts are still to fail, and evaluation inserts attempted."""

    to_fail: int
    evaluation_inserts: int = 0


class _FailingTx:
    """Delegates to a real transaction; the metric-result insert fails like a busy SQLite would.

    Every call is passed through whatever the method (``run``, ``run_many``, ``insert_rows``…),
    so the injection does not depend on how the store happens to issue its inserts.
    """

    def __init__(self, inner: Tx, faults: _Faults) -> None:
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method: Callable[..., Any] = getattr(self._inner, name)

        def call(first: object, *args: object, **kwargs: object) -> Any:
            if isinstance(first, str):
                self._observe(first.lstrip())
            return method(first, *args, **kwargs)

        return call

    def _observe(self, sql: str) -> None:
        if sql.startswith("INSERT INTO evaluations"):
            self._faults.evaluation_inserts += 1
        if sql.startswith("INSERT INTO metric_results") and self._faults.to_fail > 0:
            self._faults.to_fail -= 1
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = sqlite3.SQLITE_BUSY
            error.sqlite_errorname = "SQLITE_BUSY"
            raise error


class _FailingBackend(SqliteBackend):
    """SQLite whose first metric-result inserts fail after the evaluation row went in."""

    def __init__(self, path: Path, faults: _Faults) -> None:
        super().__init__(path, busy_timeout_s=1.0)
        self.faults = faults

    @contextmanager
    def transaction(self, *, write: bool, turn: Turn = Turn.URGENT) -> Iterator[Tx]:
        with super().transaction(write=write, turn=turn) as tx:
            yield cast(Tx, _FailingTx(tx, self.faults))


def test_sqlite_write_failing_half_way_is_rolled_back_and_retried(workdir: Path) -> None:
    """SQLite: result insert fails after the evaluation insert; rollback, retry, one record."""
    faults = _Faults(to_fail=3)
    backend = _FailingBackend(workdir / "half-way.db", faults)
    store = Store(backend, retry_attempts=5, retry_timeout_s=10.0)
    store.migrate()
    snapshots = [snapshot_record(f"half-way-{i}") for i in range(4)]
    try:
        for snap in snapshots:
            written = store.record_evaluation(evaluation_record(snap.snapshot_id), snap)
            assert written.created
        for snap in snapshots:  # a redelivery of each finds its record and writes nothing
            assert not store.record_evaluation(evaluation_record(snap.snapshot_id), snap).created
    finally:
        store.close()
    url = f"sqlite:///{workdir / 'half-way.db'}"
    counts = tally(url, [s.snapshot_id for s in snapshots], 3)
    created = len(snapshots)
    row = report_row(
        counts.counts("SQLite write fails half-way (3x)", faults.evaluation_inserts - created)
    )
    assert faults.to_fail == 0, "the three injected failures must all have fired"
    assert faults.evaluation_inserts == created + 3 + created  # retries, then the redeliveries
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert row.recorded == 4


def _waiting_writers(url: str) -> int:
    """Backends of ``url``'s database blocked on a lock inside an INSERT or a COPY (a group
    commit writes its metric results with COPY): a commit under way."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND (query ILIKE 'INSERT%' OR query ILIKE 'COPY%')"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.timeout(300)
def test_sigkill_during_a_group_commit_loses_and_duplicates_nothing(
    redis_url: str,
    fresh_pg: str,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """Worker SIGKILLed mid group commit: PostgreSQL rolls back; a new worker records each once."""
    # The kill comes while its transactions are open: rows inserted, blocked on a lock before
    # COMMIT. The broker redelivers their messages to the new worker.
    count = 200
    snapshots = variants(example_snapshots()["order-42"], count, "group-commit")
    knobs = {**backfill_knobs(redis_url, fresh_pg, judge_server, 5), "visibility_timeout_s": "8"}
    worker = start_worker(**knobs)
    with psycopg.connect(fresh_pg) as holder:
        holder.execute("LOCK TABLE metric_results IN ACCESS EXCLUSIVE MODE")
        producer_for(redis_url).enqueue_many(snapshots, lane=Lane.BACKFILL, batch_size=5)
        wait_until(lambda: _waiting_writers(fresh_pg) >= 1, 60, "a commit blocked mid-transaction")
        worker.kill_group()
        holder.rollback()  # releases the lock: the killed transactions are rolled back already
    assert evaluations_in(fresh_pg) == 0  # nothing of the open transactions was committed
    replacement = start_worker(**knobs)
    wait_drained(redis_url, 120)
    wait_until(evaluated_at_least(fresh_pg, count), 60, f"{count} evaluations")
    counts = tally(fresh_pg, [s.snapshot_id for s in snapshots], AGENT_METRICS)
    row = report_row(
        counts.counts(
            f"SIGKILL during a group commit (PostgreSQL), {count}",
            redone(judge_server.count, fresh_pg, [replacement]),
        )
    )
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
