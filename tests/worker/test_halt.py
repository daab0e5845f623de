"""Halting in-process: the first reason wins, store faults past the hold halt the committer,
a replaced file halts it at once, and a runtime whose loop ends early halts as a crash.

A real runtime (its own loop thread) and a real SQLite store whose record call is replaced by
one raising the store's own error: the fault itself is exercised through real processes in
``tests/hostile/test_hostile_store_halt.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from producer import Lane
from producer.snapshot import EVALUATE_TASK
from tests.queue.queue_kit import example_snapshots, variants
from tests.store._store_helpers import evaluation_record, snapshot_record
from worker import runtime
from worker.committer import Committer
from worker.dead_letters import raw_bytes
from worker.halt import EXIT_CRASHED, EXIT_HALTED, Halt
from worker.handling import Delivery, Handler, Verdict
from worker.judges import SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import Store, TransientStoreError, open_store


class SlowFailingReads:
    """A real store whose skip-if-done read fails after ``delay_s`` (its own retries, say)."""

    def __init__(self, store: Store, delay_s: float) -> None:
        self._store = store
        self.delay_s = delay_s

    def existing_evaluations(self, evaluation_ids: Any) -> Any:
        del evaluation_ids
        time.sleep(self.delay_s)
        raise TransientStoreError("STORE_UNAVAILABLE")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class FailingStore:
    """A real store whose evaluation writes raise ``TransientStoreError(code)``, counted."""

    def __init__(self, store: Store, code: str) -> None:
        self._store = store
        self.code = code
        self.calls = 0

    def record_evaluations(self, items: Any, urgent: bool = False, sends: Any = ()) -> Any:
        del items, urgent, sends
        self.calls += 1
        raise TransientStoreError(self.code)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def store(workdir: Path) -> Iterator[Store]:
    """A SQLite store of this test."""
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as opened:
        yield opened


def _runtime(store: Any, hold_s: float = 0.3) -> Runtime:
    settings = load_settings(processes=1, store_hold_s=hold_s)
    return Runtime(settings, store=store, judge=SyntheticJudge())


def _write(rt: Runtime, committer: Committer) -> str:
    record = evaluation_record(snapshot_record("t-halt").snapshot_id)
    with pytest.raises(TransientStoreError) as caught:  # the failing store needs no content
        rt.call(committer.write(record, None, urgent=False), timeout_s=30)
    return caught.value.code


def test_the_first_halt_wins_and_every_hook_hears_it() -> None:
    """A second stop changes nothing; a hook added after the halt runs at once."""
    halt = Halt()
    heard: list[int] = []
    halt.on_stop(heard.append)
    assert halt.stop("STORE_FULL", "test")
    assert not halt.stop("STORE_REPLACED", "test")
    halt.on_stop(heard.append)
    assert (halt.reason, heard) == ("STORE_FULL", [EXIT_HALTED, EXIT_HALTED])


def test_a_transient_fault_past_the_hold_halts_and_later_writes_fail_at_once(
    store: Store,
) -> None:
    """STORE_FULL is retried within the hold, then halts; later writes fail without the store."""
    # Never past the hold: stamina gives up when the next backoff would end after it. Failing
    # without reaching the store means nothing more is acked.
    failing = FailingStore(store, "STORE_FULL")
    hold_s = 2.5  # room for the first backoff (0.5 s plus up to 1 s of jitter) and a retry
    rt = _runtime(failing, hold_s=hold_s)
    try:
        committer = Committer(rt)
        started = time.monotonic()
        assert _write(rt, committer) == "STORE_FULL"
        held_s = time.monotonic() - started
        assert failing.calls >= 2  # retried
        assert 0.5 <= held_s <= hold_s + 0.5  # after a backoff, within the hold
        assert rt.halt.reason == "STORE_FULL"
        calls = failing.calls
        assert _write(rt, committer) == "STORE_FULL"
        assert failing.calls == calls
    finally:
        rt.close()


def test_a_replaced_file_halts_without_holding(store: Store) -> None:
    """STORE_REPLACED never comes back in this process: one attempt, then the halt."""
    failing = FailingStore(store, "STORE_REPLACED")
    rt = _runtime(failing, hold_s=30.0)
    try:
        started = time.monotonic()
        assert _write(rt, Committer(rt)) == "STORE_REPLACED"
        assert time.monotonic() - started < 5.0
        assert (failing.calls, rt.halt.reason) == (1, "STORE_REPLACED")
    finally:
        rt.close()


def _end_loop() -> None:
    raise SystemExit(0)


def test_a_read_failing_for_longer_than_the_hold_halts(store: Store) -> None:
    """A skip-if-done read failing past the hold: message requeued, STORE_UNAVAILABLE halt."""
    # The outage counts from the read's start, not from when the slow read fails.
    rt = _runtime(SlowFailingReads(store, delay_s=0.4))
    item = variants(example_snapshots()["order-42"], 1, "read")[0].wire()
    delivery = Delivery(EVALUATE_TASK, (item,), {}, Lane.LIVE, raw_bytes(item))
    try:
        with runtime.use(rt):
            verdicts = rt.call(Handler(rt).handle([delivery]), timeout_s=30)
    finally:
        rt.close()
    assert verdicts == [Verdict.REQUEUE]
    assert rt.halt.reason == "STORE_UNAVAILABLE"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_loop_that_ends_early_halts_the_runtime_as_a_crash(store: Store) -> None:
    """The loop thread ending before close() halts with RUNTIME_STOPPED and exit status 1."""
    # A crash, not a clean stop: without its loop the runtime's messages would never be settled.
    rt = _runtime(store)
    try:
        rt.loop.call_soon_threadsafe(_end_loop)
        rt._thread.join(10)  # the loop thread itself is under test
        assert (rt.halt.reason, rt.halt.exit_status) == ("RUNTIME_STOPPED", EXIT_CRASHED)
    finally:
        rt.close()
