"""The runtime and task bodies in-process: concurrency bound, backstop, error mapping."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.exceptions import Reject

from producer import Lane
from tests.queue.queue_kit import example_snapshots, variants
from worker import tasks
from worker.judges import JudgeRequest, JudgeResponse, SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.signals import RedactingFilter
from worker.store import Store, TransientStoreError, open_store


class CountingJudge:
    """The synthetic judge with a real (asyncio) delay, counting requests in flight."""

    def __init__(self, delay_s: float) -> None:
        self._inner = SyntheticJudge(delay_s=delay_s)
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self._inner(request)
        finally:
            self.in_flight -= 1


class BlockingJudge:
    """A broken judge that blocks the event loop (time.sleep): only the task backstop helps."""

    def __init__(self, block_s: float) -> None:
        self.block_s = block_s

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        time.sleep(self.block_s)  # noqa: ASYNC251 - the fault under test
        return await SyntheticJudge()(request)


@pytest.fixture
def store(workdir: Path) -> Iterator[Store]:
    """A SQLite store of this test."""
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as opened:
        yield opened


def test_batch_snapshots_run_concurrently_up_to_the_bound(store: Store) -> None:
    """A batch of 4 with concurrency 2: two judge requests at a time, never more; all recorded."""
    judge = CountingJudge(delay_s=0.3)
    settings = load_settings(concurrency=2, batch_size=4)
    rt = Runtime(settings, store=store, judge=judge)
    try:
        batch = variants(example_snapshots()["order-42"], 4, "batch")
        started = time.monotonic()
        tasks._evaluate_items(rt, [s.wire() for s in batch], Lane.BACKFILL)
        elapsed_s = time.monotonic() - started
    finally:
        rt.close()
    assert judge.most_in_flight == 2  # concurrent within the batch, never above the bound
    assert elapsed_s >= 0.6  # so two waves of 0.3 s
    assert store.count_evaluations() == 4
    assert {row.lane for row in store.iter_results()} == {"backfill"}


def test_task_backstop_records_timeouts_when_the_loop_is_stuck(store: Store) -> None:
    """A judge blocking the loop: the task stops waiting and still records all-TIMEOUT results."""
    settings = load_settings(budget_s=0.2, batch_size=1, concurrency=1)
    rt = Runtime(settings, store=store, judge=BlockingJudge(block_s=settings.longest_task_s + 3.0))
    snapshot = example_snapshots()["order-42"]
    try:
        started = time.monotonic()
        tasks._evaluate_items(rt, [snapshot.wire()], Lane.LIVE)
        waited_s = time.monotonic() - started
    finally:
        rt.close()
    assert settings.longest_task_s <= waited_s < settings.longest_task_s + 2.0
    (stored,) = [store.get_evaluation(r.evaluation_id) for r in store.iter_results()][:1]
    assert stored is not None
    assert {(r.status, r.reason) for r in stored.record.results} == {("ERROR", "TIMEOUT")}
    assert stored.record.snapshot_id == snapshot.snapshot_id


def test_store_outage_requeues_and_bugs_become_dead_letters(store: Store) -> None:
    """TransientStoreError → Reject(requeue=True); a bug → INTERNAL_ERROR dead letter."""
    rt = Runtime(load_settings(), store=store, judge=SyntheticJudge())
    try:

        def outage() -> None:
            raise TransientStoreError("STORE_UNAVAILABLE")

        with pytest.raises(Reject) as rejected:
            tasks._guarded(rt, "evalq.evaluate", Lane.LIVE, {"x": 1}, outage)
        assert rejected.value.requeue is True  # type: ignore[attr-defined]  # untyped in stubs

        def bug() -> None:
            raise KeyError("secret-content")

        tasks._guarded(rt, "evalq.evaluate", Lane.LIVE, {"x": 1}, bug)
    finally:
        rt.close()
    (dead,) = store.open_dead_letters()
    assert (dead.reason, dead.lane, dead.payload) == ("INTERNAL_ERROR", "live", b'{"x":1}')


def test_log_filter_keeps_the_exception_type_and_drops_its_text() -> None:
    """Worker logs never carry exception messages or tracebacks, only the type name."""

    def fail() -> None:
        raise ValueError("sk-secret inside a message")

    try:
        fail()
    except ValueError:
        record = logging.LogRecord(
            "t", logging.ERROR, __file__, 1, "judge failed: %s", ("BACKEND_ERROR",), sys.exc_info()
        )
    RedactingFilter().filter(record)
    text = logging.Formatter().format(record)
    assert "sk-secret" not in text
    assert text == "judge failed: BACKEND_ERROR [ValueError]"


def test_runtime_loop_is_a_background_thread_per_process(store: Store) -> None:
    """The runtime's loop runs in its own thread and is stopped by close()."""
    rt = Runtime(load_settings(), store=store, judge=SyntheticJudge())
    assert rt.loop.is_running()

    async def where() -> bool:
        return asyncio.get_running_loop() is rt.loop

    assert rt.call(where()) is True
    rt.close()
    assert not rt.loop.is_running()
