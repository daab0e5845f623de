"""Fixtures of the fault suite, and the table of counts printed at the end of the session.

Every process a test starts (workers, Redis servers, proxies) is stopped when the test ends,
whatever happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from producer import Producer
from tests.faults.fault_kit import CONTROLS, ROWS, FaultWorker, format_table
from tests.queue.queue_kit import killed_on_exit, worker_env
from worker.broker import broker_transport_options
from worker.embedded import free_port
from worker.judges.testing import JudgeServer, serve_in_thread
from worker.settings import load_settings

StartWorker = Callable[..., FaultWorker]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the fault table (every row must say lost 0, duplicated 0) and the controls."""
    if not ROWS and not CONTROLS:
        return
    terminalreporter.section("fault suite: counts after recovery")
    for line in format_table(ROWS):
        terminalreporter.write_line(line)
    if CONTROLS:
        terminalreporter.write_line("")
        terminalreporter.write_line("negative controls (configurations that must lose work):")
        for line in format_table(CONTROLS):
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _clean_env(clean_env: None) -> None:
    """Every test here sees only the EVALQ_* variables it sets (``clean_env``)."""


@pytest.fixture
def start_worker(workdir: Path) -> Iterator[StartWorker]:
    """Factory: start a worker (``python -m worker``) configured by ``EVALQ_<KEY>`` keywords.

    ``argv`` replaces the command (e.g. a celery app of the test's own); ``ready`` waits for it.
    Every worker serves ``/metrics`` on a free port (``FaultWorker.metrics_port``).
    """
    with killed_on_exit(FaultWorker) as started:

        def start(
            *, argv: list[str] | None = None, ready: bool = True, **settings: str
        ) -> FaultWorker:
            log_path = workdir / f"worker-{len(started)}.log"
            proc = FaultWorker(worker_env(**settings), log_path, argv, free_port())
            started.append(proc)
            if ready:
                proc.wait_ready()
            return proc

        yield start


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    """A synthetic System One / chat server on 127.0.0.1 (latency 0 until a test sets it)."""
    with serve_in_thread(latency_ms=0.0) as server:
        yield server


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
