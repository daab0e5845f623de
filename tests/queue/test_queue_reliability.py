"""At-least-once delivery with idempotent records: kills, duplicates, brokers and stores."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
import redis

from producer import LANE_QUEUES, Lane, Producer
from tests.queue.queue_kit import (
    WorkerProcess,
    example_snapshots,
    purge_lane_queues,
    systemone_knobs,
    variants,
    wait_until,
)
from worker.judges.testing import JudgeServer
from worker.store import Store

pytestmark = pytest.mark.services

BUDGET_S = "3"
SLOW_JUDGE_MS = 1200


def _version(store: Store, snapshot_id: str) -> str | None:
    """The metric-set version under which ``snapshot_id`` was evaluated (scan of results)."""
    for row in store.iter_results():
        if row.snapshot_id == snapshot_id:
            return row.metric_set_version
    return None


def _evaluated(store: Store, ids: list[str], version: str) -> int:
    return sum(1 for i in ids if store.find_evaluation(i, version) is not None)


def _systemone(judge: JudgeServer, store_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    return systemone_knobs(judge.base_url, store_url, broker_url, budget_s=BUDGET_S, **extra)


def test_sigkill_mid_evaluation_loses_and_duplicates_nothing(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """SIGKILL of a worker group mid-judging: after a restart, exactly one evaluation each."""
    judge_server.latency_ms = SLOW_JUDGE_MS
    knobs = _systemone(
        judge_server,
        sqlite_url,
        redis_url,
        concurrency="4",
        batch_size="1",
        visibility_timeout_s="6",
        restore_interval_s="1",
    )
    first = start_worker(**knobs)
    snapshots = variants(example_snapshots()["order-42"], 12, "kill")
    ids = [s.snapshot_id for s in snapshots]
    producer_for(**knobs).enqueue_many(snapshots)

    wait_until(lambda: judge_server.count >= 3, 20, "judge requests in flight")
    first.kill_group()
    store = open_test_store(sqlite_url)
    killed_at = time.monotonic()
    start_worker(**knobs)

    wait_until(lambda: store.count_evaluations() >= len(ids), 90, "every snapshot evaluated")
    recovery_s = time.monotonic() - killed_at
    version = _version(store, ids[0])
    assert version is not None
    assert _evaluated(store, ids, version) == len(ids)
    assert store.count_evaluations() == len(ids)  # none duplicated
    assert store.count_snapshots() == len(ids)
    assert judge_server.count > len(ids), "killed evaluations must have been redelivered"
    assert recovery_s < 120
    client = redis.Redis.from_url(redis_url)
    wait_until(lambda: client.hlen("unacked") == 0, 10, "no message left unacked")
    assert client.llen(LANE_QUEUES[Lane.LIVE]) == 0


def test_same_snapshot_three_times_gives_one_evaluation(
    redis_url: str,
    sqlite_url: str,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """One snapshot enqueued three times: three deliveries, one evaluation record."""
    worker = start_worker(broker_url=redis_url, store_url=sqlite_url)
    snapshot = example_snapshots()["return-policy-grounded"]
    producer = producer_for(redis_url)
    for _ in range(3):
        producer.enqueue(snapshot)

    def deliveries() -> int:
        log = worker.log
        return (
            log.count("evaluation recorded:")
            + log.count("already evaluated:")
            + log.count("already being evaluated:")
            + log.count("evaluation already recorded:")
        )

    wait_until(lambda: deliveries() >= 3, 30, "three deliveries")
    store = open_test_store(sqlite_url)
    assert store.count_evaluations() == 1
    assert store.count_snapshots() == 1
    assert worker.log.count("evaluation recorded:") == 1


@pytest.mark.parametrize(
    ("broker", "store_kind"),
    [("redis", "sqlite"), ("redis", "postgresql"), ("amqp", "sqlite"), ("amqp", "postgresql")],
)
def test_end_to_end_on_each_broker_and_store(
    broker: str,
    store_kind: str,
    request: pytest.FixtureRequest,
    sqlite_url: str,
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """The same pipeline (live, backfill batch, window rule in results) on each broker x store."""
    broker_url: str = request.getfixturevalue("redis_url" if broker == "redis" else "amqp_url")
    # Asked for after the broker: fixtures are torn down in reverse, so the worker stops before
    # the shared RabbitMQ's lock is released (a worker still running then handed its unacked
    # messages back to the next test's queues).
    start_worker: Callable[..., WorkerProcess] = request.getfixturevalue("start_worker")
    if broker == "amqp":
        purge_lane_queues(broker_url)
    store_url = sqlite_url if store_kind == "sqlite" else _fresh_pg(request)
    start_worker(broker_url=broker_url, store_url=store_url, batch_size="3")
    examples = example_snapshots()
    live = [examples["order-42"], examples["care-no-tools"]]
    backfill = variants(examples["store-hours-grounded"], 3, f"bf-{broker}-{store_kind}")
    producer = producer_for(broker_url, batch_size="3")
    producer.enqueue_many(live)
    producer.enqueue_many(backfill, lane=Lane.BACKFILL, batch_size=3)
    store = open_test_store(store_url)
    wait_until(lambda: store.count_evaluations() >= 5, 40, "five evaluations")

    stored = store.find_evaluation(live[0].snapshot_id, _version(store, live[0].snapshot_id) or "")
    assert stored is not None
    assert stored.record.synthetic is True
    assert stored.record.judge_model == "synthetic"
    assert stored.window_rule == live[0].window.rule.value
    assert stored.cutoff_event_id == live[0].window.cutoff_event_id
    lanes = {row.snapshot_id: row.lane for row in store.iter_results()}
    assert {lanes[s.snapshot_id] for s in backfill} == {"backfill"}
    assert lanes[live[1].snapshot_id] == "live"
    assert all(row.window_rule == "invocation_end" for row in store.iter_results())
    assert store.count_evaluations() == 5


def _fresh_pg(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL database of this test alone (so counts start at zero)."""
    base: str = request.getfixturevalue("postgres_url")
    name = f"evalq_q_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    request.addfinalizer(drop)
    return f"{base.rpartition('/')[0]}/{name}"


def test_a_batch_longer_than_the_visibility_timeout_is_not_redelivered(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """A ~7 s batch of 8 past a 4 s VT, two workers: lease renewed, judge asked exactly 8 times."""
    judge_server.latency_ms = 800
    knobs = systemone_knobs(
        judge_server.base_url,
        sqlite_url,
        redis_url,
        budget_s="1",
        concurrency="1",
        processes="1",
        batch_size="8",
        visibility_timeout_s="4",
        restore_interval_s="1",
    )
    start_worker(**knobs)
    start_worker(**knobs)
    snapshots = variants(example_snapshots()["order-42"], 8, "lease")
    producer_for(**knobs).enqueue_many(snapshots, lane=Lane.BACKFILL, batch_size=8)
    store = open_test_store(sqlite_url)
    wait_until(lambda: store.count_evaluations() >= 8, 60, "the batch evaluated")
    time.sleep(5.0)  # a redelivery would have been judged again by now
    assert judge_server.count == 8
    assert store.count_evaluations() == 8
