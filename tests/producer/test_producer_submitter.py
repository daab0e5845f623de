"""LiveSubmitter against a real Redis broker: delivery, broker outage, bounds, drops and close."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence

import pytest

from producer._submitter import LiveSubmitter, RetryPolicy
from producer.snapshot import Snapshot
from tests.producer.producer_kit import (
    CelerySender,
    TimedCall,
    flusher_in_backoff_sleep,
    make_snapshot,
    poll_until,
    queue_length,
    queued_payloads,
    quiet_interpreter,
    timed_submit,
    unexcused,
)
from worker.embedded import RedisServer

pytestmark = pytest.mark.services

PATIENT = RetryPolicy(attempts=1_000, timeout_s=60.0, wait_initial_s=0.02, wait_max_s=0.1)


def test_submitted_snapshots_arrive_on_the_queue(redis_url: str) -> None:
    """Every submitted snapshot is sent once, by name, and is readable back from Redis."""
    sender = CelerySender(redis_url)
    snapshots = [make_snapshot(f"trace-{i}") for i in range(250)]
    with LiveSubmitter(sender, batch_size=40) as submitter:
        assert all(submitter.submit(s) for s in snapshots)
        assert submitter.flush(timeout_s=20)
        stats = submitter.stats()
    sender.close()
    assert (stats.submitted, stats.sent, stats.dropped, stats.pending) == (250, 250, 0, 0)
    queued = {args[0]["trace_id"] for args in queued_payloads(redis_url, "live")}
    assert queued == {s.trace_id for s in snapshots}


def test_broker_down_never_blocks_stays_bounded_and_delivers_after_restart(
    private_redis: RedisServer,
) -> None:
    """Broker stopped: submit < 1 ms unless the OS preempts it, never waits; bounded; delivers."""
    # Timed while the flusher sleeps out its backoff after a failed send (a live app's state for
    # almost all of an outage), so what is measured is submit() itself.
    capacity, batch = 300, 25
    sender = CelerySender(private_redis.url)
    snapshots = [make_snapshot(f"trace-{i}") for i in range(2_000)]
    policy = RetryPolicy(attempts=1_000, timeout_s=60.0, wait_initial_s=0.3, wait_max_s=0.3)
    submitter = LiveSubmitter(sender, capacity=capacity, batch_size=batch, retry=policy)
    try:
        private_redis.stop()
        for snapshot in snapshots[:batch]:
            submitter.submit(snapshot)
        poll_until(lambda: sender.failures >= 1 and flusher_in_backoff_sleep(submitter))
        calls: list[TimedCall] = []
        peak_pending = 0
        with quiet_interpreter():
            for snapshot in snapshots[batch:]:
                calls.append(timed_submit(submitter.submit, snapshot))
                peak_pending = max(peak_pending, submitter.stats().pending)
        down = submitter.stats()
        slow = [c for c in calls if c.wall_s >= 0.001]
        assert unexcused(calls) == [], f"slow without OS preemption: {unexcused(calls)[:5]}"
        assert len(slow) <= len(calls) // 100
        assert peak_pending <= capacity
        assert down.submitted == capacity
        assert down.dropped_full == 2_000 - capacity
        assert down.sent == 0
        private_redis.start()  # same port: the sender's connection pool reconnects
        assert submitter.flush(timeout_s=30)
        up = submitter.stats()
    finally:
        submitter.close()
        sender.close()
    assert (up.sent, up.dropped_failed, up.pending) == (capacity, 0, 0)
    assert queue_length(private_redis.url, "live") == capacity
    arrived = {args[0]["trace_id"] for args in queued_payloads(private_redis.url, "live")}
    assert arrived == {s.trace_id for s in snapshots[:capacity]}


def test_exhausted_retries_drop_with_counter_and_a_content_free_log_line(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """After bounded retries a batch is dropped, counted, and logged by reason code only."""
    sender = CelerySender(private_redis.url)
    private_redis.stop()
    policy = RetryPolicy(attempts=3, timeout_s=5.0, wait_initial_s=0.01, wait_max_s=0.02)
    secret = "card 4111-1111-1111-1111"
    with caplog.at_level(logging.WARNING, logger="evalq.producer.submit"):
        submitter = LiveSubmitter(sender, batch_size=10, retry=policy)
        for i in range(30):
            assert submitter.submit(make_snapshot(f"t{i}", text=secret))
        assert submitter.flush(timeout_s=30)
        stats = submitter.close()
    sender.close()
    assert (stats.sent, stats.dropped_failed) == (0, 30)
    drops = [r.getMessage() for r in caplog.records if "evalq.submit.dropped" in r.getMessage()]
    assert sender.calls == 3 * len(drops)  # every batch tried 3 times: retried, bounded
    assert all("reason=SEND_FAILED" in m for m in drops)
    assert sum(int(m.split("count=")[1].split()[0]) for m in drops) == 30
    assert not any("4111" in r.getMessage() or "t1" in r.getMessage() for r in caplog.records)


def test_full_buffer_drops_are_logged_off_the_request_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drops for a full buffer are not logged by submit() but summarised later by the flusher."""
    release: list[bool] = []

    def stuck_send(batch: Sequence[Snapshot]) -> None:
        while not release:
            time.sleep(0.005)

    with caplog.at_level(logging.WARNING, logger="evalq.producer.submit"):
        submitter = LiveSubmitter(stuck_send, capacity=5, batch_size=1)
        results = [submitter.submit(make_snapshot(f"t{i}")) for i in range(20)]
        assert not any("BUFFER_FULL" in r.getMessage() for r in caplog.records)
        release.append(True)
        stats = submitter.close()
    assert results.count(True) == 5
    assert stats.dropped_full == 15
    assert stats.sent == 5
    lines = [r.getMessage() for r in caplog.records if "BUFFER_FULL" in r.getMessage()]
    assert len(lines) == 1
    assert "count=15" in lines[0]


def test_close_stops_accepting_and_counts_what_is_left(redis_url: str) -> None:
    """close() drains what it can; later submits return False and are counted as dropped_closed."""
    sender = CelerySender(redis_url)
    submitter = LiveSubmitter(sender, batch_size=7)
    for i in range(20):
        submitter.submit(make_snapshot(f"t{i}"))
    stats = submitter.close(timeout_s=20)
    assert stats.sent == 20
    assert stats.pending == 0
    assert submitter.submit(make_snapshot("late")) is False
    assert submitter.stats().dropped_closed == 1
    assert queue_length(redis_url, "live") == 20
    sender.close()


def test_encoding_errors_are_not_retried() -> None:
    """A ValueError send is not retried: one batch try, then each snapshot alone; each counted."""
    # A ValueError is a bad snapshot, not an outage; trying each alone drops only the bad ones.
    calls: list[list[str]] = []

    def bad_send(batch: Sequence[Snapshot]) -> None:
        calls.append([s.trace_id for s in batch])
        raise ValueError

    submitter = LiveSubmitter(bad_send, batch_size=5, retry=PATIENT)
    for i in range(5):
        submitter.submit(make_snapshot(f"t{i}"))
    assert submitter.flush(timeout_s=5)
    stats = submitter.close()
    # How many snapshots the flusher takes at once depends on thread timing (no linger), so
    # the test pins each snapshot's history: one batch try at most, then exactly one alone.
    for i in range(5):
        mine = [len(c) for c in calls if f"t{i}" in c]
        assert len(mine) <= 2, (i, calls)
        assert mine[-1] == 1, (i, calls)
        assert all(n > 1 for n in mine[:-1]), (i, calls)
    assert stats.dropped_failed == 5


def test_periodic_hook_runs_on_the_flusher_and_at_close() -> None:
    """The periodic hook (e.g. a sampling tally) runs on its interval and once more at close."""
    ticks: list[float] = []
    submitter = LiveSubmitter(
        lambda batch: None,
        periodic=lambda: ticks.append(time.monotonic()),
        periodic_interval_s=0.05,
    )
    deadline = time.monotonic() + 5
    while len(ticks) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    before_close = len(ticks)
    submitter.close()
    assert len(ticks) >= before_close + 1


def test_a_forked_child_gets_a_working_flusher_of_its_own() -> None:
    """After fork (gunicorn --preload, multiprocessing) the child's submits are still sent."""
    sent_in_child: list[int] = []
    submitter = LiveSubmitter(lambda batch: sent_in_child.append(len(batch)), batch_size=2)
    submitter.submit(make_snapshot("parent"))
    assert submitter.flush(timeout_s=5)
    pid = os.fork()
    if pid == 0:  # child: exit status tells the parent what happened
        ok = all(submitter.submit(make_snapshot(f"child-{i}")) for i in range(3))
        ok = ok and submitter.flush(timeout_s=5) and submitter.stats().sent == 3
        os._exit(0 if ok and sum(sent_in_child) == 4 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert submitter.close().sent == 1  # the parent's own counters are untouched
