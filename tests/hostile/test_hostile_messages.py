"""Hostile messages on the lane lists, through a real worker process: each becomes a dead letter
with its raw bytes, nothing stays in ``unacked``, and the worker keeps serving."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from producer import Lane, Producer
from producer.snapshot import EVALUATE_TASK, LANE_QUEUES
from tests.hostile.hostile_kit import record
from tests.queue.queue_kit import WorkerProcess, example_snapshots, variants, wait_until, worker_env
from worker.store import Store

pytestmark = pytest.mark.services

LIVE = LANE_QUEUES[Lane.LIVE]


def _envelope(payload: bytes, **overrides: Any) -> dict[str, Any]:
    """A kombu Redis envelope of an evalq.evaluate message, with parts replaced."""
    headers = {"task": EVALUATE_TASK, "id": uuid.uuid4().hex, "lang": "py"}
    envelope: dict[str, Any] = {
        "body": base64.b64encode(payload).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "body_encoding": "base64",
            "delivery_info": {"exchange": "evalq", "routing_key": LIVE},
            "delivery_mode": 2,
            "delivery_tag": uuid.uuid4().hex,
            "priority": 0,
        },
    }
    for key, value in overrides.items():
        if key in ("eta", "expires"):
            headers[key] = value
        else:
            envelope[key] = value
    return envelope


def _args(snapshot: dict[str, Any]) -> bytes:
    return json.dumps([[snapshot], {}, {}]).encode()


CASES: list[tuple[str, Any, str]] = [
    ("list item 'not json'", "not json", "UNDECODABLE"),
    ("list item '[1,2,3]'", "[1,2,3]", "UNDECODABLE"),
    ("list item '42'", "42", "UNDECODABLE"),
    ("invalid base64 body", {"body": "%%%not base64%%%"}, "UNDECODABLE"),
    ("unknown body_encoding", {"properties_encoding": "rot13"}, "UNDECODABLE"),
    ("headers that are a list", {"headers": ["task", EVALUATE_TASK]}, "UNDECODABLE"),
    ("envelope without properties", {"properties": None}, "UNDECODABLE"),
    ("eta far in the future", {"eta": "2999-01-01T00:00:00+00:00"}, "SCHEDULED"),
    ("expires in the past", {"expires": "2001-01-01T00:00:00+00:00"}, "EXPIRED"),
]


def _raw_item(spec: Any, body: bytes) -> str:
    if isinstance(spec, str):
        return spec
    spec = dict(spec)
    envelope = _envelope(body, **{k: v for k, v in spec.items() if k != "properties_encoding"})
    if envelope.get("properties") is None:
        envelope.pop("properties")
    if "properties_encoding" in spec:
        envelope["properties"]["body_encoding"] = spec["properties_encoding"]
    return json.dumps(envelope)


@pytest.fixture
def worker(redis_url: str, store_url: str, workdir: Path) -> Iterator[WorkerProcess]:
    """One single-process worker on the live lane of the test's Redis and store."""
    process = WorkerProcess(
        worker_env(broker_url=redis_url, store_url=store_url, lanes="live", processes="1"),
        workdir / "worker.log",
    )
    try:
        process.wait_ready(60)
        yield process
    finally:
        process.stop()


def test_every_hostile_list_item_becomes_a_dead_letter_and_the_worker_serves_on(
    redis_url: str, store: Store, worker: WorkerProcess, store_url: str
) -> None:
    """Each hostile list item is a dead letter with its raw bytes; a valid one later is recorded."""
    # Garbage items, broken envelopes, eta and expired messages; ``unacked`` ends empty.
    snapshot = example_snapshots()["order-42"].wire()
    client = redis.Redis.from_url(redis_url)
    try:
        for _, spec, _ in CASES:
            client.lpush(LIVE, _raw_item(spec, _args(snapshot)))
        valid = variants(example_snapshots()["order-42"], 1, "after-hostile")[0]
        with Producer(redis_url) as producer:
            producer.enqueue(valid)
        wait_until(lambda: store.count_evaluations() == 1, 30, "the valid snapshot recorded")
        wait_until(lambda: len(store.open_dead_letters()) == len(CASES), 30, "the dead letters")
        wait_until(lambda: client.hlen("unacked") == 0, 30, "nothing left unacked")
    finally:
        client.close()
    assert worker.process.poll() is None  # still serving
    reasons = sorted(d.reason for d in store.open_dead_letters())
    assert reasons == sorted(code for _, _, code in CASES)
    payloads = {d.payload for d in store.open_dead_letters()}
    assert b"not json" in payloads  # the raw bytes, not a type name
    assert b"42" in payloads
    assert "Traceback" not in worker.log
    for case, _, code in CASES:
        record(f"worker: {case}", f"dead letter {code}, worker alive, unacked 0")
