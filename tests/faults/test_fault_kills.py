"""SIGKILL of worker process groups during a backfill on both lanes, and its negative control.

The harness (docs/queue.md has the measurements behind it): real workers in their own process
groups, a real judge
server, a real Redis; faults injected while judge requests are in flight; a bounded wait for
recovery; then exact counts read from the store and a broker that holds nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from producer import LANE_QUEUES, Lane, Producer, Snapshot
from tests.faults.conftest import StartWorker
from tests.faults.fault_kit import (
    AGENT_METRICS,
    SOAK,
    FaultWorker,
    backfill_knobs,
    evaluated_at_least,
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

BACKFILL_N = 10_000 if SOAK else 1_500
KILLS = 6 if SOAK else 3
BATCH = 5
RECOVERY_S = 600.0 if SOAK else 120.0


def _victim(workers: list[FaultWorker], wait_s: float = 5.0) -> FaultWorker:
    """The first of ``workers`` seen judging (its judge responses grew between two scrapes),
    else, after ``wait_s``, the oldest: on a loaded machine the work can run out while a
    replacement starts, and a kill then finds nothing in flight anywhere."""
    before = [worker.judge_responses() for worker in workers]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        after = [worker.judge_responses() for worker in workers]
        grown = [w for w, old, new in zip(workers, before, after, strict=True) if new > old]
        if grown:
            return grown[0]
        before = after
    return workers[0]


def _split_lanes(prefix: str, count: int) -> tuple[list[Snapshot], list[Snapshot]]:
    """``count`` distinct snapshots: half for the live lane, half for the backfill lane."""
    base = example_snapshots()["order-42"]
    live = variants(base, count // 2, f"{prefix}-live")
    return live, variants(base, count - count // 2, f"{prefix}-backfill")


@pytest.mark.timeout(3600 if SOAK else 300)
def test_repeated_sigkill_during_backfill_on_both_lanes(
    redis_url: str,
    workdir: Path,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """Worker groups SIGKILLed repeatedly mid-run: each snapshot evaluated once, none re-sent."""
    # A message a killed worker was being handed is in `unacked` already (the reliable fetch
    # registers it in the same step that pops it), so acks_late brings back everything.
    judge_server.latency_ms = 20
    store_url = f"sqlite:///{workdir / 'kills.db'}"
    knobs = backfill_knobs(redis_url, store_url, judge_server, BATCH)
    workers = [start_worker(**knobs), start_worker(**knobs)]
    live, backfill = _split_lanes("kill", BACKFILL_N)
    producer = producer_for(redis_url, batch_size=str(BATCH))

    producer.enqueue_many(live, lane=Lane.LIVE)
    producer.enqueue_many(backfill, lane=Lane.BACKFILL, batch_size=BATCH)
    expected = [s.snapshot_id for s in (*live, *backfill)]

    for kill in range(KILLS):
        mark = BACKFILL_N * (kill + 1) // (KILLS + 2)
        wait_until(evaluated_at_least(store_url, mark), 120, f"{mark} evaluations")
        victim = _victim(workers)  # not a replacement still starting, if any is judging
        workers.remove(victim)
        victim.kill_group()
        workers.append(start_worker(**knobs))

    wait_recovered(redis_url, store_url, RECOVERY_S)
    counts = tally(store_url, expected, AGENT_METRICS)
    extra = redone(judge_server.count, store_url, workers)
    scenario = f"SIGKILL worker groups x{KILLS}, {BACKFILL_N}"
    row = report_row(counts.counts(scenario, extra))
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert row.recorded == row.expected == BACKFILL_N
    assert judge_server.count > recorded_requests(store_url), "kills must hit work in flight"
    for worker in workers:
        assert "INTERNAL_ERROR" not in worker.log


def _early_ack_argv() -> list[str]:
    queues = ",".join(LANE_QUEUES[lane] for lane in (Lane.LIVE, Lane.BACKFILL))
    return [
        *(sys.executable, "-m", "celery", "-A", "tests.faults.early_ack_app", "worker"),
        *("--pool=solo", "--concurrency=16", f"--queues={queues}", "--loglevel=INFO"),
        *("--without-gossip", "--without-mingle", "--hostname=early-ack@%h"),
    ]


@pytest.mark.parametrize("acks_late", [True, False], ids=["acks-late", "control-early-ack"])
def test_sigkill_mid_judging_loses_work_only_without_acks_late(
    acks_late: bool,
    redis_url: str,
    workdir: Path,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """Same kill, two configurations: shipped one loses nothing; acks_late off loses work."""
    # The control proves that the counting can see loss: with early acks the messages of the
    # evaluations that were running when the group died are gone for good.
    judge_server.latency_ms = 1500
    store_url = f"sqlite:///{workdir / 'control.db'}"
    knobs = system_one_knobs(
        redis_url, store_url, judge_server, budget_s="3", concurrency="16", batch_size="1"
    )
    knobs["visibility_timeout_s"] = "6"
    argv = None if acks_late else _early_ack_argv()
    first = start_worker(argv=argv, **knobs)
    snapshots = variants(example_snapshots()["order-42"], 40, f"control-{acks_late}")
    producer_for(redis_url).enqueue_many(snapshots, lane=Lane.LIVE)

    wait_until(lambda: judge_server.count >= 16, 20, "16 judge requests in flight")
    first.kill_group()  # each of them still has > 1 s to go: all 16 are mid-judging
    second = start_worker(**knobs)
    wait_recovered(redis_url, store_url, 60)

    counts = tally(store_url, [s.snapshot_id for s in snapshots], AGENT_METRICS)
    scenario = "SIGKILL mid-judging, " + (
        "acks after commit" if acks_late else "ack on arrival (control)"
    )
    extra = redone(judge_server.count, store_url, [second])
    row = report_row(counts.counts(scenario, extra), control=not acks_late)
    assert (row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0)
    if acks_late:
        assert (row.lost, row.recorded) == (0, 40)
    else:
        assert row.lost >= 1, "early acks must lose the evaluations that were running"


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux ``/proc``)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.mark.timeout(300)
def test_sigkill_of_one_consumer_process_of_a_multi_process_worker(
    redis_url: str,
    workdir: Path,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """One consumer process SIGKILLed mid-run: it is restarted; every snapshot evaluated once."""
    # 2 consumer processes per lane group (live, and backfill + outcomes): 4 in all. The killed
    # one's unacked messages come back after the visibility timeout.
    judge_server.latency_ms = 20
    store_url = f"sqlite:///{workdir / 'one-child.db'}"
    knobs = system_one_knobs(
        redis_url, store_url, judge_server, budget_s="1", processes="2", visibility_timeout_s="8"
    )
    worker = start_worker(**knobs)
    wait_until(lambda: len(_children(worker.process.pid)) == 4, 60, "four consumer processes")
    assert "consumer process 3 started" in worker.log  # the supervisor's own INFO lines are logged
    count = 600
    live, backfill = _split_lanes("one-child", count)
    producer = producer_for(redis_url, batch_size=str(BATCH))
    producer.enqueue_many(live, lane=Lane.LIVE)
    producer.enqueue_many(backfill, lane=Lane.BACKFILL, batch_size=BATCH)
    expected = [s.snapshot_id for s in (*live, *backfill)]
    wait_until(evaluated_at_least(store_url, count // 4), 120, f"{count // 4} evaluations")
    victim = _children(worker.process.pid)[-1]  # the last started: a backfill + outcomes one
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: "restarting" in worker.log, 30, "the supervisor to restart it")
    wait_recovered(redis_url, store_url, RECOVERY_S)
    counts = tally(store_url, expected, AGENT_METRICS)
    row = report_row(
        counts.counts(
            f"SIGKILL 1 of 4 consumer processes, {count}",
            redone(judge_server.count, store_url, [worker]),
        )
    )
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert worker.process.poll() is None  # the worker itself kept serving
    assert victim not in _children(worker.process.pid)
    assert len(_children(worker.process.pid)) == 4
