"""A warm shutdown (SIGTERM) of a busy worker: nothing new starts, the evaluations running finish
and are recorded, every other held message goes back to its queue at once (not after the
visibility timeout), and the next worker records every snapshot exactly once without judging
any of them twice."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from producer import Lane, Producer
from tests.faults.conftest import StartWorker
from tests.faults.fault_kit import (
    AGENT_METRICS,
    broker_backlog,
    evaluated_at_least,
    evaluations_in,
    recorded_requests,
    redone,
    report_row,
    system_one_knobs,
    tally,
    wait_recovered,
)
from tests.queue.queue_kit import example_snapshots, variants, wait_until
from worker.judges.testing import JudgeServer

pytestmark = pytest.mark.services

SLOTS = 4
BATCH = 8
MESSAGES = 12
"""96 snapshots; the worker holds 2 messages per slot (64 snapshots), 16 judge rounds' worth."""


@pytest.mark.timeout(300)
def test_sigterm_returns_what_has_not_started_and_nothing_is_lost_or_judged_twice(
    redis_url: str,
    workdir: Path,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """SIGTERM while busy: at most two more rounds, nothing unacked; each snapshot judged once."""
    # At the signal the worker holds 64 snapshots and is judging 4 (1 s each); a second worker
    # finishes the rest, and no judge request is left without its record.
    judge_server.latency_ms = 1000
    store_url = f"sqlite:///{workdir / 'shutdown.db'}"
    knobs = system_one_knobs(
        redis_url,
        store_url,
        judge_server,
        budget_s="5",
        concurrency=str(SLOTS),
        processes="1",
        lanes="backfill",
        batch_size=str(BATCH),
    )
    first = start_worker(**knobs)
    snapshots = variants(example_snapshots()["order-42"], BATCH * MESSAGES, "sigterm")
    producer_for(redis_url, batch_size=str(BATCH)).enqueue_many(
        snapshots, lane=Lane.BACKFILL, batch_size=BATCH
    )
    wait_until(evaluated_at_least(store_url, SLOTS), 60, "the first round recorded")
    at_signal = evaluations_in(store_url)
    first.process.send_signal(signal.SIGTERM)
    first.process.wait(timeout=60)
    by_first = evaluations_in(store_url)
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        unacked = int(client.hlen("unacked"))
    finally:
        client.close()
    assert first.process.returncode == 0, first.log[-3000:]
    # The old drain finished every held message (64 snapshots) before exiting.
    assert by_first <= at_signal + 2 * SLOTS
    assert unacked == 0  # returned to the queue at once, not left to the visibility timeout
    assert broker_backlog(redis_url) > 0
    assert "message returned to the broker" in first.log
    second = start_worker(**{**knobs, "concurrency": "64"})  # the rest in one or two rounds
    wait_recovered(redis_url, store_url, 120)
    counts = tally(store_url, [s.snapshot_id for s in snapshots], AGENT_METRICS)
    scenario = f"SIGTERM with {BATCH * MESSAGES} held, then a new worker"
    row = report_row(counts.counts(scenario, redone(judge_server.count, store_url, [second])))
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert row.redone == 0
    assert judge_server.count == recorded_requests(store_url)
    for worker in (first, second):
        assert "INTERNAL_ERROR" not in worker.log
