"""Conflicting outcome events through a real worker and Redis: an event id already stored with
other content becomes one ``OUTCOME_CONFLICT`` dead letter (its raw bytes kept, the stored
outcome unchanged), an identical resend is a no-op, ``evalq status`` shows the conflict and
``evalq redrive`` leaves it open instead of re-sending it."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from producer import Lane, OutcomeEvent, Producer
from producer.snapshot import LANE_QUEUES
from tests.hostile.hostile_kit import evalq, record
from tests.queue.queue_kit import WorkerProcess, wait_until, worker_env
from worker.store import Store

pytestmark = pytest.mark.services

OUTCOMES = LANE_QUEUES[Lane.OUTCOMES]


@pytest.fixture
def worker(redis_url: str, store_url: str, workdir: Path) -> Iterator[WorkerProcess]:
    """One single-process worker on the outcomes lane of the test's Redis and store."""
    env = worker_env(broker_url=redis_url, store_url=store_url, lanes="outcomes", processes="1")
    process = WorkerProcess(env, workdir / "worker.log")
    try:
        process.wait_ready(60)
        yield process
    finally:
        process.stop()


def _event(value: object, name: str = "refund_reversed") -> OutcomeEvent:
    return OutcomeEvent(
        event_id="evt-1",
        trace_id="order-42",
        name=name,
        value=value,
        observed_at=datetime(2026, 1, 2, tzinfo=UTC),
    )


def _stored_values(store_url: str) -> list[tuple[str, str]]:
    path = store_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT name, value FROM outcomes WHERE event_id = 'evt-1'")
        return [(str(name), str(value)) for name, value in rows]


def _drained(client: redis.Redis) -> bool:
    return client.llen(OUTCOMES) == 0 and client.hlen("unacked") == 0


def test_a_conflicting_outcome_is_a_dead_letter_and_the_stored_one_stays(
    redis_url: str, store_url: str, store: Store, worker: WorkerProcess, env: dict[str, str]
) -> None:
    """Same id, other value or name: an OUTCOME_CONFLICT dead letter each; the first row stays."""
    # Each dead letter keeps the raw message; an identical resend adds nothing.
    # Redrive leaves the conflicts open: re-sent, they would still be invalid.
    client = redis.Redis.from_url(redis_url)
    try:
        with Producer(redis_url) as producer:
            producer.outcome(_event({"amount": 12.5}))
            wait_until(lambda: len(_stored_values(store_url)) == 1, 30, "the first outcome")
            producer.outcome(_event({"amount": 99}))
            producer.outcome(_event({"amount": 12.5}, name="chargeback"))
            producer.outcome(_event({"amount": 12.5}))  # identical: idempotent
        wait_until(lambda: len(store.open_dead_letters()) == 2, 30, "the conflicts")
        wait_until(lambda: _drained(client), 30, "every outcome message acked")
    finally:
        client.close()
    assert _stored_values(store_url) == [("refund_reversed", '{"amount":12.5}')]
    conflicts = store.open_dead_letters()
    assert sorted(d.reason for d in conflicts) == ["OUTCOME_CONFLICT", "OUTCOME_CONFLICT"]
    payloads = b" ".join(d.payload for d in conflicts)
    assert b"99" in payloads
    assert b"chargeback" in payloads
    assert worker.process.poll() is None
    status = evalq(env, "status")
    assert "OUTCOME_CONFLICT 2" in status.stdout, status.stdout + status.stderr
    redriven = evalq(env, "redrive")
    assert redriven.returncode == 0, redriven.stderr
    assert "OUTCOME_CONFLICT" in redriven.stdout + redriven.stderr
    assert len(store.open_dead_letters()) == 2  # left open, nothing re-sent
    record(
        "outcome event: same event_id, other value or name",
        "dead letter OUTCOME_CONFLICT (raw bytes), stored outcome unchanged, status shows it, "
        "redrive leaves it open",
    )
    record("outcome event: identical resend", "no-op (no dead letter, nothing written)")
