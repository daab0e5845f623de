"""Hostile queue messages become dead letters with a reason code, and the worker keeps serving.

``tests/queue/test_queue_pipeline.py`` already covers pickle, malformed JSON, schema version 2, a
window violation and an unknown task name; this module adds the rest of the list (oversized
payloads, batches over the limit, bad arguments, other serializers, non-task and broken-protocol
messages, schema versions of other types, broken outcome events) and a property: any JSON value
as a task argument yields dead letters (one per refused item) and never stops the worker.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer import EVALUATE_TASK, OUTCOME_TASK, Lane, Producer, Snapshot
from producer.snapshot import MAX_BATCH_ITEMS, MAX_ITEM_BYTES
from tests.properties.strategies import examples, json_values
from tests.queue.queue_kit import (
    WorkerProcess,
    example_snapshots,
    publish_raw,
    task_headers,
    wait_until,
    worker_env,
)
from worker.broker import broker_transport_options
from worker.embedded import RedisServer
from worker.handling import decode_snapshot
from worker.metrics import DEAD_LETTER_REASONS
from worker.settings import load_settings
from worker.store import Store, open_store

pytestmark = pytest.mark.services

BATCH_SIZE = 4


@dataclass
class Served:
    """One worker for the whole module, its store and a producer on its broker."""

    worker: WorkerProcess
    store: Store
    producer: Producer
    broker_url: str

    def counts(self) -> tuple[int, int]:
        """(evaluations, dead letters) recorded so far."""
        return self.store.count_evaluations(), len(self.store.open_dead_letters())


@pytest.fixture(scope="module")
def served(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A worker on the session's Redis (flushed first) with a SQLite store of this module."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    directory = tmp_path_factory.mktemp("messages")
    url = f"sqlite:///{directory / 'messages.db'}"
    knobs = {"broker_url": redis_server.url, "store_url": url, "batch_size": str(BATCH_SIZE)}
    worker = WorkerProcess(worker_env(**knobs), directory / "worker.log")
    worker.wait_ready()
    config = load_settings(broker_url=redis_server.url)
    producer = Producer(
        redis_server.url,
        transport_options=broker_transport_options(config, redis_server.url),
    )
    store = open_store(url)
    try:
        yield Served(worker, store, producer, redis_server.url)
    finally:
        producer.close()
        store.close()
        with contextlib.suppress(Exception):
            worker.kill_group()


def _still_serving(served: Served, label: str) -> None:
    """A fresh valid snapshot is evaluated: the worker survived whatever came before."""
    before, _ = served.counts()
    snapshot = Snapshot.model_validate(
        {**example_snapshots()["care-no-tools"].wire(), "trace_id": f"alive-{label}"}
    )
    served.producer.enqueue(snapshot, lane=Lane.LIVE)
    wait_until(lambda: served.counts()[0] == before + 1, 30, "the worker to keep serving")
    assert served.worker.process.poll() is None


def _new_reasons(served: Served, seen: int) -> list[str]:
    return [d.reason for d in served.store.open_dead_letters()][seen:]


def test_each_kind_of_hostile_message_gets_its_own_reason_code(served: Served) -> None:
    """Each kind of hostile message gets one dead letter with its own reason code."""
    # Oversized, over-batch, bad arguments, other serializers, non-task, broken protocol, odd
    # schema versions, broken outcomes.
    _, seen = served.counts()
    wire = example_snapshots()["order-42"].wire()
    sends: list[tuple[str, Any]] = [
        ("PAYLOAD_TOO_LARGE", {**wire, "source": "x" * (MAX_ITEM_BYTES + 1)}),
        ("BATCH_TOO_LARGE", [wire] * (MAX_BATCH_ITEMS + 1)),
        ("BAD_ARGUMENTS", []),
        ("UNSUPPORTED_SCHEMA_VERSION", {**wire, "schema_version": 0}),
        ("UNSUPPORTED_SCHEMA_VERSION", {**wire, "schema_version": "1"}),
        ("UNSUPPORTED_SCHEMA_VERSION", {**wire, "schema_version": [1]}),
        ("SCHEMA_INVALID", {"not": "a snapshot"}),
    ]
    for _, payload in sends:
        served.producer.send_raw(EVALUATE_TASK, payload, lane=Lane.LIVE)
    served.producer.send_raw(OUTCOME_TASK, {"event_id": "e", "schema_version": 9}, lane="live")
    publish_raw(served.broker_url, b"\x80\x04K\x01.", "application/x-python-serialize",
             task_headers(EVALUATE_TASK))  # fmt: skip
    publish_raw(served.broker_url, "{}", "application/x-yaml", task_headers(EVALUATE_TASK))
    publish_raw(served.broker_url, '{"hello": 1}', "application/json", {})  # no task header
    publish_raw(served.broker_url, '"just a string"', "application/json",
             {"task": EVALUATE_TASK})  # fmt: skip
    publish_raw(served.broker_url, "[[], {}, {}]", "application/json", task_headers("os.system"))

    expected = sorted(
        [code for code, _ in sends]
        + ["UNSUPPORTED_SCHEMA_VERSION"]  # the outcome event
        + ["CONTENT_DISALLOWED", "CONTENT_DISALLOWED"]
        + ["UNKNOWN_MESSAGE", "INVALID_MESSAGE", "UNKNOWN_TASK"]
    )
    wait_until(lambda: len(_new_reasons(served, seen)) >= len(expected), 30, "the dead letters")
    assert sorted(_new_reasons(served, seen)) == expected
    oversized = [d for d in served.store.open_dead_letters() if d.reason == "PAYLOAD_TOO_LARGE"]
    assert oversized[-1].truncated  # kept bounded, flagged, never evaluated
    _still_serving(served, "hostile")


def _expected_dead(body: Any) -> int:
    """Dead letters one message with argument ``body`` must produce (items refused)."""
    items = body if isinstance(body, list) else [body]
    if not items or len(items) > MAX_BATCH_ITEMS:
        return 1
    return sum(1 for item in items if not _decodes(item))


def _decodes(item: Any) -> bool:
    try:
        decode_snapshot(item)
    except Exception:
        return False
    return True


@settings(
    max_examples=examples(6),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(bodies=st.lists(json_values, min_size=1, max_size=6))
def test_any_json_argument_becomes_dead_letters_and_the_worker_keeps_serving(
    served: Served, bodies: list[Any]
) -> None:
    """Random JSON as the task argument: one dead letter per refused item, never a crash."""
    evaluations, seen = served.counts()
    for body in bodies:
        served.producer.send_raw(EVALUATE_TASK, body, lane=Lane.LIVE)
    expected = sum(_expected_dead(body) for body in bodies)
    wait_until(lambda: served.counts()[1] >= seen + expected, 30, f"{expected} dead letters")
    assert served.counts() == (evaluations, seen + expected)
    assert set(_new_reasons(served, seen)) <= DEAD_LETTER_REASONS
    _still_serving(served, uuid.uuid4().hex[:8])
