"""Builders and timing helpers shared by the producer tests (and the producer end-to-end tests)."""

from __future__ import annotations

import base64
import gc
import json
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from producer._submitter import LiveSubmitter
from producer.snapshot import (
    EVALUATE_TASK,
    Event,
    EventType,
    SliceMeta,
    Snapshot,
    Window,
    WindowRule,
)

__all__ = [
    "CelerySender",
    "TimedCall",
    "flusher_in_backoff_sleep",
    "make_snapshot",
    "poll_until",
    "queue_length",
    "queued_payloads",
    "quiet_interpreter",
    "timed_submit",
    "unexcused",
    "write_lines",
]


def _line(i: int) -> str:
    return (
        f'{{"id":"t{i}","metadata":{{"agent_version":"v{i % 3}"}},"messages":['
        f'{{"role":"user","content":"question {i}"}},'
        f'{{"role":"assistant","content":"answer {i}"}}]}}\n'
    )


def write_lines(path: Path, count: int, *, start: int = 0, bad_every: int = 0) -> int:
    """Write ``count`` chat traces (every ``bad_every``-th one broken); returns the bad count."""
    bad = 0
    with path.open("w", encoding="utf-8") as out:
        for i in range(start, start + count):
            if bad_every and i % bad_every == bad_every - 1:
                bad += 1
                out.write(f'{{"id":"x{i}","messages":[{{"content":"no role"}}]}}\n')
            else:
                out.write(_line(i))
    return bad


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


# --- timing the request path ---------------------------------------------------------------------


@contextmanager
def quiet_interpreter() -> Iterator[None]:
    """Measure our code, not the interpreter's scheduling: short GIL slices, no GC pauses.

    The default 5 ms GIL switch interval lets *any* busy thread (here the flusher retrying the
    broker) hold the caller for up to 5 ms regardless of what submit() does; a cyclic GC pass
    is likewise not submit()'s doing. Both are restored afterwards.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0001)
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        sys.setswitchinterval(interval)


@dataclass(frozen=True)
class TimedCall:
    """One timed call: wall time and the calling thread's context switches during it."""

    wall_s: float
    waited: int  # voluntary context switches: the thread blocked (lock, GIL, I/O)
    preempted: int  # involuntary ones: the OS gave the CPU to another process


def timed_submit(submit: Callable[[Snapshot], object], snapshot: Snapshot) -> TimedCall:
    """One ``submit(snapshot)``, timed, with the calling thread's context switches during it.

    On a shared 2-core box the OS may preempt the caller for several ms whatever it runs; such a
    call shows an involuntary switch. A submit that blocked on the broker (or on a lock held
    across a send) would be slow on every call with no preemption at all, which is what the
    tests rule out; the rare preempted call is excused, the fraction of them bounded.
    """
    before = resource.getrusage(resource.RUSAGE_THREAD)
    start = time.perf_counter()
    submit(snapshot)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_THREAD)
    return TimedCall(wall_s, after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw)


def unexcused(calls: Sequence[TimedCall], limit_s: float = 0.001) -> list[TimedCall]:
    """Calls at or over ``limit_s`` that the OS did not preempt (they blocked: never allowed)."""
    return [c for c in calls if c.wall_s >= limit_s and not c.preempted]


def flusher_in_backoff_sleep(submitter: LiveSubmitter) -> bool:
    """True once the flusher thread sleeps in the kernel (stamina's backoff ``time.sleep``).

    Right after a failed send the flusher still logs the scheduled retry; timing submit() in
    that instant would measure GIL sharing with that logging, not submit(). Linux ``wchan``
    tells a real sleep (``hrtimer_nanosleep``) from a wait for the GIL or a lock (futex).
    """
    name = f"evalq-submit-{submitter.name}"
    (thread,) = [t for t in threading.enumerate() if t.name == name]
    try:
        wchan = Path(f"/proc/self/task/{thread.native_id}/wchan").read_text()
    except OSError:
        return False
    return "nanosleep" in wchan


def poll_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` every 5 ms; assert it became true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)
