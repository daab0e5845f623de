"""Append-only for real on PostgreSQL: a worker role that may only INSERT and SELECT.

A fresh database owned by an owner role; ``evalq store migrate`` runs as the owner, the worker
role gets the documented grants and nothing else. The worker then starts without DDL rights,
records everything it records, and cannot delete, update, truncate, drop a trigger or switch
``session_replication_role``; the owner's ``evalq purge`` still expires old content.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from producer import Lane, Producer
from producer.snapshot import EVALUATE_TASK
from tests.conftest import POSTGRES_URL
from tests.queue.queue_kit import REPO, WorkerProcess, example_snapshots, wait_until, worker_env
from tests.store._store_helpers import evaluation_record, outcome_record, snapshot_record
from worker import runtime
from worker.dead_letters import raw_bytes
from worker.halt import EXIT_HALTED
from worker.handling import Delivery, Handler, Verdict
from worker.judges import SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import DeadLetterRecord, PermanentStoreError, open_store

pytestmark = pytest.mark.services

WORKER_GRANTS = (
    "GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO {worker}",
    "REVOKE INSERT ON content_purges FROM {worker}",  # only the owner records a purge
)
"""The grants docs/store-roles.md tells operators to give the worker role."""


@dataclass(frozen=True)
class Roles:
    """URLs of one fresh database for its owner role, its worker role and the superuser."""

    owner_url: str
    worker_url: str
    admin_url: str
    worker: str


def _url(role: str, database: str) -> str:
    base, _, _ = POSTGRES_URL.rpartition("/")
    scheme, _, rest = base.partition("://")
    host = rest.rpartition("@")[2]
    return f"{scheme}://{role}@{host}/{database}"


@pytest.fixture
def roles() -> Iterator[Roles]:
    """Two LOGIN roles and a database owned by the first; all dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    owner, worker, database = f"evalq_owner_{tag}", f"evalq_worker_{tag}", f"evalq_roles_{tag}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL is not reachable ({type(exc).__name__})")
    with admin:
        admin.execute(f'CREATE ROLE "{owner}" LOGIN')
        admin.execute(f'CREATE ROLE "{worker}" LOGIN')
        admin.execute(f'CREATE DATABASE "{database}" OWNER "{owner}"')
    admin_url = f"{POSTGRES_URL.rpartition('/')[0]}/{database}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{worker}"')
    try:
        yield Roles(_url(owner, database), _url(worker, database), admin_url, worker)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{worker}"')
            admin.execute(f'DROP ROLE IF EXISTS "{owner}"')


def _evalq(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env=worker_env(store_url=store_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _migrate_and_grant(roles: Roles) -> None:
    done = _evalq(roles.owner_url, "store", "migrate")
    assert done.returncode == 0, done.stderr
    assert "created" in done.stdout
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        for grant in WORKER_GRANTS:
            owner.execute(grant.format(worker=f'"{roles.worker}"'))


def _denied(url: str, sql: str) -> str | None:
    """The SQLSTATE the worker role gets for ``sql`` (None: it was accepted)."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(sql)
        except psycopg.Error as exc:
            return exc.sqlstate
    return None


def test_worker_role_without_ddl_rights_needs_the_owner_to_migrate(roles: Roles) -> None:
    """Before ``evalq store migrate`` the worker role cannot create the schema: a clear code."""
    with pytest.raises(PermanentStoreError) as caught:
        open_store(roles.worker_url)
    assert caught.value.code == "SCHEMA_NOT_MIGRATED"


def test_insert_select_worker_records_and_cannot_bypass_append_only(roles: Roles) -> None:
    """The worker starts (no DDL), writes every record kind, and every bypass is refused."""
    _migrate_and_grant(roles)
    snapshot = snapshot_record("t-role")
    with open_store(roles.worker_url) as store:
        assert store.migrate() is False  # current schema recognised with reads only
        assert store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot).created
        store.record_outcome(outcome_record("o-role", "t-role"))
        store.record_redrive(store.record_dead_letter(DeadLetterRecord(reason="X", payload=b"{")))
        store.record_checkpoint("bf-role", "file.jsonl", offset=3, enqueued=3)
        assert store.count_evaluations() == 1
    bypasses = {
        "DELETE FROM evaluations": "42501",
        "UPDATE evaluations SET run = run": "42501",
        "TRUNCATE evaluations CASCADE": "42501",
        "DELETE FROM snapshot_contents": "42501",
        "INSERT INTO content_purges (content_before, requested_at) VALUES (now(), now())": "42501",
        "DROP TRIGGER evaluations_append_only ON evaluations": "42501",
        "ALTER TABLE evaluations DISABLE TRIGGER ALL": "42501",
        "SET session_replication_role = replica": "42501",
        "CREATE TABLE sneaky (x int)": "42501",
    }
    got = {sql: _denied(roles.worker_url, sql) for sql in bypasses}
    assert got == bypasses
    with open_store(roles.worker_url) as store:
        assert store.count_evaluations() == 1


def test_owner_purge_expires_content_and_worker_still_reads(roles: Roles) -> None:
    """``evalq purge`` as the owner removes old content; the worker still reads every record."""
    _migrate_and_grant(roles)
    snapshot = snapshot_record("t-purge")
    with open_store(roles.worker_url) as store:
        store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    done = _evalq(roles.owner_url, "purge", "--content-before", datetime.now(UTC).isoformat())
    assert done.returncode == 0, done.stderr
    assert "expired 1 snapshot content(s)" in done.stdout
    with open_store(roles.worker_url) as store:
        assert store.get_snapshot(snapshot.snapshot_id) is None
        assert store.find_evaluation(snapshot.snapshot_id, "agent@1") is not None
        assert store.count_snapshots() == 1


def test_a_record_the_role_may_not_insert_is_a_record_refused_dead_letter(roles: Roles) -> None:
    """No INSERT grant on evaluations: the snapshot is a RECORD_REFUSED dead letter, acked once."""
    # A deployment mistake; requeueing would judge the message and be refused again for ever.
    _migrate_and_grant(roles)
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        owner.execute(f'REVOKE INSERT ON evaluations FROM "{roles.worker}"')
    snapshot = example_snapshots()["order-42"]
    delivery = Delivery(
        EVALUATE_TASK, (snapshot.wire(),), {}, Lane.LIVE, raw_bytes(snapshot.wire())
    )
    with open_store(roles.worker_url) as store:
        rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
        try:
            with runtime.use(rt):
                verdicts = rt.call(Handler(rt).handle([delivery]), timeout_s=30)
        finally:
            rt.close()
        assert verdicts == [Verdict.ACK]
        assert [d.reason for d in store.open_dead_letters()] == ["RECORD_REFUSED"]
        assert store.count_evaluations() == 0


def test_a_dead_letter_the_role_may_not_insert_halts_the_worker(
    roles: Roles, redis_url: str, workdir: Path
) -> None:
    """No INSERT on dead_letters: exit 75 on one line, the message kept; granted, it is kept."""
    _migrate_and_grant(roles)
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        owner.execute(f'REVOKE INSERT ON dead_letters FROM "{roles.worker}"')
    with Producer(redis_url) as producer:
        producer.send_raw(EVALUATE_TASK, {"schema_version": 1, "nope": True}, lane=Lane.LIVE)
    env = worker_env(broker_url=redis_url, store_url=roles.worker_url, lanes="live", processes="1")
    worker = WorkerProcess(env, workdir / "halted.log")
    try:
        code = worker.process.wait(60)
    finally:
        worker.kill_group()
    assert code == EXIT_HALTED, worker.log[-3000:]
    assert worker.log.count("worker halted: STORE_PERMISSION_DENIED") == 1
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        owner.execute(f'GRANT INSERT ON dead_letters TO "{roles.worker}"')
    restarted = WorkerProcess(env, workdir / "restarted.log")
    try:
        with open_store(roles.worker_url) as store:
            wait_until(lambda: bool(store.open_dead_letters()), 60, "the dead letter")
            assert [d.reason for d in store.open_dead_letters()] == ["SCHEMA_INVALID"]
    finally:
        restarted.stop()
