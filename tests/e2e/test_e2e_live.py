"""`Producer.submit` end to end: a broker outage, then real workers evaluate; sampling tallies."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from producer import LANE_QUEUES, TALLY_TASK, Lane, Producer, Sampler
from producer._backfill import RedisQueueDepth
from producer._sampling import unit_value
from producer._submitter import LiveSubmitter, RetryPolicy
from tests.producer.producer_kit import (
    TimedCall,
    flusher_in_backoff_sleep,
    make_snapshot,
    poll_until,
    quiet_interpreter,
    timed_submit,
    unexcused,
)
from tests.queue.queue_kit import WorkerProcess, wait_until
from worker.broker import broker_transport_options
from worker.embedded import RedisServer
from worker.settings import load_settings
from worker.store import Store

pytestmark = pytest.mark.services

CAPACITY = 300
BATCH = 25
OUTAGE_SUBMITS = 2_000


@contextmanager
def _producer(url: str, **live: Any) -> Iterator[Producer]:
    """A Producer with the worker's transport options (as ``evalq`` builds it) and live options."""
    options = broker_transport_options(load_settings(broker_url=url), url)
    producer = Producer(url, transport_options=options, **live)
    try:
        yield producer
    finally:
        producer.close(timeout_s=10)


def _live(producer: Producer) -> LiveSubmitter:
    live = producer._live  # the flusher thread is looked up by the submitter's name
    assert live is not None
    return live


def _evaluated_traces(store: Store) -> set[str]:
    return {row.trace_id for row in store.iter_results()}


def test_submit_with_the_broker_down_never_blocks_and_delivers_after_restart(
    private_redis: RedisServer,
    store_url: str,
    store: Store,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """Broker stopped: each submit < 1 ms (unless OS-preempted), bounded; restarted: evaluated."""
    snapshots = [make_snapshot(f"outage-{i}") for i in range(OUTAGE_SUBMITS)]
    patient = RetryPolicy(attempts=1_000, timeout_s=120.0, wait_initial_s=0.3, wait_max_s=0.3)
    live = {"live_capacity": CAPACITY, "live_batch_size": BATCH, "live_retry": patient}
    with _producer(private_redis.url, **live) as producer:
        private_redis.stop()
        for snapshot in snapshots[:BATCH]:
            assert producer.submit(snapshot)
        poll_until(lambda: flusher_in_backoff_sleep(_live(producer)))
        calls: list[TimedCall] = []
        peak_pending = 0
        with quiet_interpreter():
            for snapshot in snapshots[BATCH:]:
                calls.append(timed_submit(producer.submit, snapshot))
                peak_pending = max(peak_pending, _live(producer).stats().pending)
        assert unexcused(calls) == []
        assert sum(c.wall_s >= 0.001 for c in calls) <= len(calls) // 100
        assert peak_pending <= CAPACITY
        # Memory does not grow with what is refused while the buffer is full.
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        for snapshot in snapshots:
            producer.submit(snapshot)
        after, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert after - before < 64 * 1024
        down = producer.live_stats()
        assert down is not None
        assert (down.submitted, down.sent, down.pending) == (CAPACITY, 0, CAPACITY)
        assert down.dropped_full == 2 * OUTAGE_SUBMITS - CAPACITY

        private_redis.start()  # same port: the next attempt of the flusher reconnects
        start_worker(broker_url=private_redis.url, store_url=store_url)
        assert producer.flush(timeout_s=30)
        up = producer.live_stats()
        assert up is not None
        assert (up.sent, up.dropped_failed, up.pending) == (CAPACITY, 0, 0)
    wait_until(lambda: store.count_evaluations() == CAPACITY, 60, "the buffered snapshots")
    assert _evaluated_traces(store) == {s.trace_id for s in snapshots[:CAPACITY]}


def test_sampling_tallies_and_evaluations_account_for_every_submitted_unit(
    redis_url: str,
    store_url: str,
    store: Store,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """Rate 0.5 over 200 units: the stored tallies' sampled-out + evaluations == 200."""
    start_worker(broker_url=redis_url, store_url=store_url)
    snapshots = [make_snapshot(f"sampled-{i}") for i in range(200)]
    expected = {s.trace_id for s in snapshots if unit_value(s.trace_id) < 0.5}
    with _producer(redis_url, sampler=Sampler(default_rate=0.5), tally_interval_s=0.1) as producer:
        kept = [producer.submit(s) for s in snapshots[:100]]
        # The periodic tally reaches the store while the producer is still running.
        wait_until(lambda: _seen(store) == 100, 30, "the first periodic tally")
        kept += [producer.submit(s) for s in snapshots[100:]]
    # close() drained the buffer and sent the last tally.
    wait_until(lambda: _seen(store) == 200, 30, "the final tally")
    wait_until(lambda: store.count_evaluations() == len(expected), 60, "the sampled snapshots")
    (row,) = store.sampled_out_counts()
    assert (row.rule, row.rate, row.lane) == ("default", 0.5, "live")
    assert row.sampled_out + store.count_evaluations() == 200
    assert row.sampled == sum(kept) == len(expected)
    assert _evaluated_traces(store) == expected


def _seen(store: Store) -> int:
    return sum(row.seen for row in store.sampled_out_counts())


def test_tally_task_stores_a_redelivery_once_and_dead_letters_an_invalid_one(
    redis_url: str,
    store_url: str,
    store: Store,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """evalq.sampling_tally: a tally delivered twice counts once; a bad one is dead-lettered."""
    start_worker(broker_url=redis_url, store_url=store_url)
    sampler = Sampler(default_rate=0.25)
    for i in range(40):
        sampler.sample(make_snapshot(f"tally-{i}"))
    tally = sampler.drain_tally()
    invalid = {**tally.wire(), "rows": [{"rule": "default", "seen": -1}]}
    with _producer(redis_url) as producer:
        producer.send_tally(tally)
        producer.send_tally(tally)  # at-least-once: the same tally id again
        producer.send_raw(TALLY_TASK, invalid, lane=Lane.OUTCOMES)
    outcomes = RedisQueueDepth(redis_url, LANE_QUEUES[Lane.OUTCOMES], include_unacked=True)
    wait_until(lambda: bool(store.open_dead_letters()), 30, "the dead letter")
    wait_until(lambda: _seen(store) >= 40 and outcomes() == 0, 30, "both tally deliveries")
    outcomes.close()
    (dead,) = store.open_dead_letters()
    assert (dead.reason, dead.task, dead.lane) == ("SCHEMA_INVALID", TALLY_TASK, "outcomes")
    (row,) = store.sampled_out_counts()
    assert (row.seen, row.sampled) == (40, tally.rows[0].sampled)
