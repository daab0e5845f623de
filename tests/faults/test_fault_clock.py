"""Clock skew between producer and worker never moves a window cutoff.

The window is part of the snapshot: its cutoff event and time come from the trace, and the worker
checks events against the snapshot's own cutoff, never against its clock. Skew is constructed in
the data (timestamps years away from the worker's now, enqueue headers a day off), no faketime.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery

from producer import EVALUATE_TASK, LANE_QUEUES, Lane, Snapshot, read_snapshots
from producer.snapshot import ENQUEUED_AT_HEADER
from producer.topology import LANE_EXCHANGE
from tests.faults.conftest import StartWorker
from tests.faults.fault_kit import AGENT_METRICS, redone, report_row, store_rows, tally
from tests.queue.queue_kit import REPO, example_snapshots, wait_until
from worker.store import open_store

pytestmark = pytest.mark.services

FIXTURE = REPO / "tests" / "fixtures" / "traces" / "otel_genai.jsonl"
YEAR_NS = 365 * 24 * 3600 * 10**9


def _timed(base: Snapshot, trace_id: str, start: datetime, *, late_s: float = 0.0) -> Snapshot:
    """``base`` with one event per second from ``start``; the cutoff time is the last event's.

    ``late_s`` > 0 timestamps the *first* event after the cutoff time (a window violation).
    """
    wire = base.wire()
    events = [
        {**event, "timestamp": (start + timedelta(seconds=i)).isoformat()}
        for i, event in enumerate(wire["events"])
    ]
    cutoff = start + timedelta(seconds=len(events) - 1)
    if late_s:
        events[0]["timestamp"] = (cutoff + timedelta(seconds=late_s)).isoformat()
    window = {**wire["window"], "cutoff_time": cutoff.isoformat()}
    return Snapshot.model_validate(
        {**wire, "trace_id": trace_id, "events": events, "window": window}
    )


def _send(broker_url: str, snapshot: Snapshot, enqueued_at: float) -> None:
    """Publish like a producer whose clock reads ``enqueued_at`` (the header it stamps)."""
    app = Celery("skewed-producer", broker=broker_url, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    queue = LANE_QUEUES[Lane.LIVE]
    app.send_task(
        EVALUATE_TASK,
        args=(snapshot.wire(),),
        queue=queue,
        exchange=LANE_EXCHANGE,
        routing_key=queue,
        headers={ENQUEUED_AT_HEADER: enqueued_at},
    )
    app.close()


def _queue_wait(port: int) -> tuple[float, float]:
    """(count, sum) of ``evalq_queue_wait_seconds{lane="live"}`` on a worker's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    values = {}
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head in (
            'evalq_queue_wait_seconds_count{lane="live"}',
            'evalq_queue_wait_seconds_sum{lane="live"}',
        ):
            values[head.split("{")[0].rsplit("_", 1)[1]] = float(value)
    return values.get("count", 0.0), values.get("sum", 0.0)


def test_worker_checks_the_snapshot_cutoff_not_its_own_clock(
    redis_url: str, workdir: Path, start_worker: StartWorker
) -> None:
    """Events years ahead of or behind the worker, headers a day off: cutoffs stored as sent."""
    url = f"sqlite:///{workdir / 'clock.db'}"
    worker = start_worker(broker_url=redis_url, store_url=url)
    base = example_snapshots()["order-42"]
    now = datetime.now(UTC).replace(microsecond=0)
    skews = {
        "future-10y": timedelta(days=3653),
        "past-30y": -timedelta(days=10957),
        "now": timedelta(),
    }
    good = [_timed(base, f"clock-{name}", now + skew) for name, skew in skews.items()]
    late = _timed(base, "clock-late", now - timedelta(days=3653), late_s=1.0)
    offsets_s = (86_400.0, -86_400.0, 0.0)  # producer clock ahead, behind, in step
    for snapshot, offset_s in zip(good, offsets_s, strict=True):
        _send(redis_url, snapshot, time.time() + offset_s)
    _send(redis_url, late, time.time())

    store = open_store(url)
    try:
        wait_until(lambda: store.count_evaluations() == len(good), 20, "the skewed snapshots")
        wait_until(lambda: len(store.open_dead_letters()) == 1, 20, "the late event's dead letter")
        assert [d.reason for d in store.open_dead_letters()] == ["WINDOW_VIOLATION"]
    finally:
        store.close()
    for snapshot in good:
        rows = store_rows(
            url,
            "SELECT DISTINCT r.cutoff_time, r.cutoff_event_id FROM metric_results r"
            " JOIN evaluations e ON e.evaluation_id = r.evaluation_id"
            f" WHERE e.snapshot_id = '{snapshot.snapshot_id}'",
        )
        assert snapshot.window.cutoff_time is not None
        assert [(datetime.fromisoformat(str(t)), c) for t, c in rows] == [
            (snapshot.window.cutoff_time, snapshot.window.cutoff_event_id)
        ]
    count, total_s = _queue_wait(worker.metrics_port)
    assert count == len(good) + 1
    assert total_s >= 86_000  # the producer behind by a day shows as a day of waiting...
    assert total_s < 86_400 + 60  # ...and the one ahead is clamped to 0, never negative
    counts = tally(url, [s.snapshot_id for s in good], AGENT_METRICS)
    row = report_row(
        counts.counts("clock skew (events +-10/30 y, headers +-1 d)", redone(None, url, [worker]))
    )
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)


def _shifted(path: Path, out: Path, shift_ns: int) -> Path:
    """A copy of an OTLP file with every ``*UnixNano`` time moved by ``shift_ns``."""

    def shift(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: str(int(v) + shift_ns) if k.endswith("UnixNano") else shift(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [shift(v) for v in value]
        return value

    lines = path.read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join(json.dumps(shift(json.loads(x))) for x in lines if x.strip()) + "\n")
    return out


@pytest.mark.parametrize("years", [10, -20])
def test_producer_cutoffs_follow_the_trace_not_the_producer_clock(
    years: int, workdir: Path
) -> None:
    """The same trace shifted by years: same cutoff events, cutoff times shifted exactly."""
    shift_ns = years * YEAR_NS
    original = list(read_snapshots(FIXTURE))
    moved = list(read_snapshots(_shifted(FIXTURE, workdir / "shifted.jsonl", shift_ns)))
    assert [s.window.cutoff_event_id for s in moved] == [s.window.cutoff_event_id for s in original]
    delta = timedelta(microseconds=shift_ns // 1000)
    for before, after in zip(original, moved, strict=True):
        assert before.window.cutoff_time is not None
        assert after.window.cutoff_time == before.window.cutoff_time + delta
        assert [e.id for e in after.events] == [e.id for e in before.events]
        after.check_window()  # the shifted snapshot is valid against its own cutoff
