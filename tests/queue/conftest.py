"""Fixtures for the queue tests: real worker subprocesses, a real judge server, stores, producers.

Every process a test starts is killed (whole group, SIGKILL) when the test ends, whatever happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from producer import Producer
from tests.queue.queue_kit import WorkerProcess, killed_on_exit, worker_env
from worker.broker import broker_transport_options
from worker.judges.testing import JudgeServer, serve_in_thread
from worker.settings import load_settings
from worker.store import Store, open_store


@pytest.fixture(autouse=True)
def _clean_env(clean_env: None) -> None:
    """Every test here sees only the EVALQ_* variables it sets (``clean_env``)."""


@pytest.fixture
def start_worker(workdir: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory: start a ready worker configured by ``EVALQ_<KEY>=value`` keywords."""
    with killed_on_exit(WorkerProcess) as started:

        def start(**settings: str) -> WorkerProcess:
            index = len(started)
            proc = WorkerProcess(worker_env(**settings), workdir / f"worker-{index}.log")
            started.append(proc)
            proc.wait_ready()
            return proc

        yield start


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    """A synthetic System One server on 127.0.0.1 (latency 0 until a test sets it)."""
    with serve_in_thread(latency_ms=0.0) as server:
        yield server


@pytest.fixture
def sqlite_url(workdir: Path) -> str:
    """A SQLite store URL in the test's directory."""
    return f"sqlite:///{workdir / 'evalq.db'}"


@pytest.fixture
def open_test_store() -> Iterator[Callable[[str], Store]]:
    """Factory: open a store (closed at the end of the test)."""
    opened: list[Store] = []

    def open_(url: str) -> Store:
        store = open_store(url)
        opened.append(store)
        return store

    try:
        yield open_
    finally:
        for store in opened:
            store.close()


@pytest.fixture
def producer_for() -> Iterator[Callable[..., Producer]]:
    """Factory: a Producer on ``broker_url`` with the worker's transport options."""
    made: list[Producer] = []

    def make(broker_url: str, **settings: str) -> Producer:
        config = load_settings(broker_url=broker_url, **settings)
        producer = Producer(
            broker_url, transport_options=broker_transport_options(config, broker_url)
        )
        made.append(producer)
        return producer

    try:
        yield make
    finally:
        for producer in made:
            producer.close()
