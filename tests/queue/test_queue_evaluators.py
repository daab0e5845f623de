"""Evaluator processes (EVALQ_EVALUATOR_PROCESSES): same records, nothing lost or doubled."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from producer import Lane, Producer
from producer.snapshot import EVALUATE_TASK
from tests.queue.queue_kit import (
    WorkerProcess,
    example_snapshots,
    systemone_knobs,
    variants,
    wait_until,
)
from worker.judges._server import JudgeServer
from worker.settings import ConfigError, load_settings
from worker.store import Store

pytestmark = pytest.mark.services

_READY = re.compile(r"evaluator process (\d+) ready")


def _knobs(judge: JudgeServer, store_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    return systemone_knobs(
        judge.base_url, store_url, broker_url, lanes="backfill", evaluator_processes="2", **extra
    )


def _evaluator_pids(worker: WorkerProcess, count: int) -> list[int]:
    wait_until(lambda: len(_READY.findall(worker.log)) >= count, 60, f"{count} evaluators ready")
    return [int(pid) for pid in _READY.findall(worker.log)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"  # a zombie has exited


def test_evaluator_processes_record_each_snapshot_once_and_dead_letter_bad_items(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """Batches in 2 evaluator processes: one record per snapshot, bad items dead-lettered."""
    knobs = _knobs(judge_server, sqlite_url, redis_url, batch_size="8", concurrency="8")
    worker = start_worker(**knobs)
    pids = _evaluator_pids(worker, 2)
    snapshots = variants(example_snapshots()["order-42"], 40, "evp")
    producer = producer_for(**knobs)
    producer.send_many(snapshots, lane=Lane.BACKFILL, batch_size=8)
    good = example_snapshots()["store-hours-grounded"].wire()
    producer.send_raw(EVALUATE_TASK, [good, {"schema_version": 1}], lane=Lane.BACKFILL)

    store = open_test_store(sqlite_url)
    wait_until(lambda: store.count_evaluations() == 41, 60, "41 evaluations")
    wait_until(lambda: len(store.open_dead_letters()) == 1, 20, "one dead letter")
    assert [d.reason for d in store.open_dead_letters()] == ["SCHEMA_INVALID"]
    assert store.count_snapshots() == 41
    assert judge_server.count == 41
    assert "evaluations recorded: 8 new" in worker.log
    assert re.search(r"/evaluator-(\d+)\] evaluations recorded", worker.log)
    assert all(_alive(pid) for pid in pids)
    worker.stop()
    wait_until(lambda: not any(_alive(pid) for pid in pids), 15, "evaluators stopped with it")


def test_a_killed_evaluator_loses_and_duplicates_nothing(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """SIGKILL of an evaluator mid-judging: its messages are requeued, each recorded once."""
    judge_server.latency_ms = 800
    knobs = _knobs(judge_server, sqlite_url, redis_url, batch_size="2", concurrency="4")
    worker = start_worker(**knobs)
    victim = _evaluator_pids(worker, 2)[0]
    snapshots = variants(example_snapshots()["order-42"], 16, "evk")
    producer_for(**knobs).send_many(snapshots, lane=Lane.BACKFILL, batch_size=2)
    wait_until(lambda: judge_server.count >= 4, 20, "judge requests in flight")
    os.kill(victim, signal.SIGKILL)

    store = open_test_store(sqlite_url)
    wait_until(lambda: store.count_evaluations() >= 16, 90, "every snapshot evaluated")
    time.sleep(1.0)  # a duplicate would land now
    assert store.count_evaluations() == 16
    assert store.count_snapshots() == 16
    assert "EVALUATOR_LOST" in worker.log
    assert len(_evaluator_pids(worker, 3)) == 3, "a new evaluator replaced the killed one"
    assert judge_server.count > 16, "the killed evaluator's snapshots were judged again"


def test_evaluators_exit_when_their_worker_is_killed(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """SIGKILL of the worker alone: its evaluator processes exit on their own (no orphans)."""
    worker = start_worker(**_knobs(judge_server, sqlite_url, redis_url))
    pids = _evaluator_pids(worker, 2)
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait(timeout=10)
    wait_until(lambda: not any(_alive(pid) for pid in pids), 10, "orphaned evaluators to exit")


def test_evaluator_processes_need_the_threads_pool() -> None:
    """EVALQ_EVALUATOR_PROCESSES with the prefork pool is refused, naming the variable."""
    with pytest.raises(ConfigError, match="EVALQ_EVALUATOR_PROCESSES: needs EVALQ_POOL=threads"):
        load_settings(evaluator_processes=2, pool="prefork")


def test_evaluator_metrics_need_multiprocess_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exporter with evaluator processes needs PROMETHEUS_MULTIPROC_DIR (else counters hide)."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(ConfigError, match="PROMETHEUS_MULTIPROC_DIR"):
        load_settings(evaluator_processes=2, metrics_port=9100)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/tmp")
    assert load_settings(evaluator_processes=2, metrics_port=9100).evaluator_processes == 2
