"""Builders shared by the producer tests (imported by name; this folder has no package)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import redis
from celery import Celery

from producer.snapshot import (
    EVALUATE_TASK,
    Event,
    EventType,
    SliceMeta,
    Snapshot,
    Window,
    WindowRule,
)

__all__ = ["CelerySender", "make_snapshot", "queue_length", "queued_payloads"]


def make_snapshot(
    trace_id: str,
    *,
    text: str = "hello",
    tool: str | None = None,
    agent_version: str | None = None,
    environment: str | None = None,
) -> Snapshot:
    """A small valid invocation snapshot (user message, optional tool call, final answer)."""
    events = [Event(id=f"{trace_id}:0", type=EventType.USER, text=text)]
    if tool is not None:
        events.append(Event(id=f"{trace_id}:1", type=EventType.ASSISTANT))
        events.append(
            Event(
                id=f"{trace_id}:2",
                type=EventType.TOOL_CALL,
                tool_name=tool,
                call_id="c1",
                parent_id=f"{trace_id}:1",
                arguments={"q": text},
            )
        )
    events.append(Event(id=f"{trace_id}:{len(events)}", type=EventType.ASSISTANT, text="done"))
    return Snapshot(
        trace_id=trace_id,
        events=tuple(events),
        window=Window(rule=WindowRule.INVOCATION_END, cutoff_event_id=events[-1].id),
        labels={},
        slice=SliceMeta(agent_version=agent_version, environment=environment),
    )


class CelerySender:
    """A minimal real Celery client: sends each snapshot BY NAME to a queue on a Redis broker.

    Publishing does not retry inside Celery (``task_publish_retry=False``) so a stopped broker
    fails the call and the submitter's own retry policy is what is exercised.
    """

    def __init__(self, url: str, queue: str = "live") -> None:
        self.app = Celery("evalq-test-sender", broker=url, set_as_current=False)
        self.app.conf.update(
            task_publish_retry=False,
            broker_connection_retry=False,
            broker_connection_timeout=1,
            # kombu otherwise re-tries the connection for ~2 s inside every publish
            broker_transport_options={"max_retries": 1, "interval_start": 0, "interval_max": 0.05},
            task_serializer="json",
        )
        self.queue = queue
        self.calls = 0
        self.failures = 0

    def __call__(self, batch: Sequence[Snapshot]) -> None:
        self.calls += 1
        try:
            with self.app.producer_or_acquire() as producer:
                for snapshot in batch:
                    self.app.send_task(
                        EVALUATE_TASK, args=[snapshot.wire()], queue=self.queue, producer=producer
                    )
        except Exception:
            self.failures += 1
            raise

    def close(self) -> None:
        self.app.close()


def queued_payloads(url: str, queue: str) -> list[list[Any]]:
    """The Celery ``args`` of every message in ``queue`` (read with redis-py, not consumed)."""
    client = redis.Redis.from_url(url)
    try:
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    payloads = []
    for item in raw:
        envelope = json.loads(item)
        body = base64.b64decode(envelope["body"])
        args, _kwargs, _embed = json.loads(body)
        payloads.append(args)
    return payloads


def queue_length(url: str, queue: str) -> int:
    """LLEN of ``queue``."""
    client = redis.Redis.from_url(url)
    try:
        return int(client.llen(queue))
    finally:
        client.close()
