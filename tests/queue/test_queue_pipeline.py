"""Task behaviour end to end through real workers: budgets, outcomes, dead letters, redrive."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery

from producer import EVALUATE_TASK, LANE_QUEUES, Lane, OutcomeEvent, Producer, Snapshot
from producer.snapshot import SamplingTally, TallyRow
from producer.topology import LANE_EXCHANGE
from tests.queue.queue_kit import (
    WorkerProcess,
    example_snapshots,
    publish_raw,
    systemone_knobs,
    task_headers,
    wait_until,
)
from worker.dead_letters import redrive
from worker.embedded import free_port
from worker.judges.testing import JudgeServer, status
from worker.store import Store

pytestmark = pytest.mark.services

BUDGET_S = 0.5


def _with(snapshot: Snapshot, **changes: Any) -> Snapshot:
    return Snapshot.model_validate({**snapshot.wire(), **changes})


def _only_evaluation(store: Store) -> Any:
    rows = list(store.iter_results())
    assert rows, "no results recorded"
    stored = store.get_evaluation(rows[0].evaluation_id)
    assert stored is not None
    return stored


def test_slow_judge_records_timeouts_within_budget(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """Judge slower than the budget: unreached metrics TIMEOUT, finished kept, recorded on time."""
    judge_server.latency_ms = 3000
    start_worker(
        broker_url=redis_url,
        store_url=sqlite_url,
        judge="systemone",
        judge_url=judge_server.base_url,
        judge_api_key="test-key",
        thresholds="0.2,0.8",
        budget_s=str(BUDGET_S),
    )
    expected = [{"name": "get_order", "arguments": {"order_id": "42"}}]
    snapshot = _with(
        example_snapshots()["order-42"],
        metric_set="agent+trajectory",
        expected_tool_calls=expected,
    )
    producer_for(redis_url).enqueue(snapshot)
    store = open_test_store(sqlite_url)
    wait_until(lambda: store.count_evaluations() == 1, 20, "the evaluation record")

    stored = _only_evaluation(store)
    results = {r.metric_id: r for r in stored.record.results}
    trajectory = results.pop("trajectory_match")
    assert (trajectory.status, trajectory.passed) == ("DECIDED", True)
    execution = results.pop("tool_execution")  # deterministic too: settled before the judge
    assert (execution.status, execution.label) == ("DECIDED", "ok")
    assert {(r.status, r.reason) for r in results.values()} == {("ERROR", "TIMEOUT")}
    assert len(results) == 7
    assert all(r.judge_model is None for r in results.values())
    assert stored.record.requests == 1
    assert stored.record.usage == ()
    # elapsed_s runs from the evaluation's start to the hand-over of the record to the store.
    assert BUDGET_S <= stored.record.elapsed_s <= BUDGET_S + 0.05
    assert judge_server.count == 1


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


def _outcome(name: str, trace_id: str) -> OutcomeEvent:
    return OutcomeEvent(
        event_id=f"{name}-{uuid.uuid4().hex[:8]}",
        trace_id=trace_id,
        name=name,
        value={"source": "test"},
        observed_at=datetime.now(UTC),
    )


def test_outcomes_before_after_and_twice_link_without_changing_rows(
    redis_url: str,
    workdir: Path,
    sqlite_url: str,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """Outcomes before and after the evaluation link; a re-sent one changes nothing; rows stay."""
    worker = start_worker(
        broker_url=redis_url, store_url=sqlite_url, outcome_criteria="refund_reversed"
    )
    producer = producer_for(redis_url)
    snapshot = example_snapshots()["refund-ungrounded"]
    early = _outcome("customer_complaint", snapshot.trace_id)
    producer.outcome(early)
    wait_until(lambda: "outcome recorded" in worker.log, 20, "the early outcome")

    producer.enqueue(snapshot)
    store = open_test_store(sqlite_url)
    wait_until(lambda: store.count_evaluations() == 1, 20, "the evaluation")
    evaluation_id = _only_evaluation(store).evaluation_id
    links = store.links_for_evaluation(evaluation_id)
    assert [link.outcome.event_id for link in links] == [early.event_id]
    assert store.pending_outcomes(evaluation_id) == ("refund_reversed",)
    db = workdir / "evalq.db"
    before = {
        table: _rows(db, f"SELECT * FROM {table} ORDER BY 1, 2")
        for table in ("snapshots", "evaluations", "metric_results", "outcomes", "outcome_links")
    }

    late = _outcome("refund_reversed", snapshot.trace_id)
    producer.outcome(late)
    wait_until(lambda: len(store.links_for_evaluation(evaluation_id)) == 2, 20, "the late link")
    producer.outcome(late)
    wait_until(lambda: "outcome already recorded" in worker.log, 20, "the re-sent outcome")

    links = store.links_for_evaluation(evaluation_id)
    assert [link.outcome.event_id for link in links] == [early.event_id, late.event_id]
    assert store.pending_outcomes(evaluation_id) == ()
    for table, rows in before.items():
        now = _rows(db, f"SELECT * FROM {table} ORDER BY 1, 2")
        assert all(row in now for row in rows), f"an earlier {table} row changed"
    assert len(_rows(db, "SELECT * FROM outcomes")) == 2
    assert len(_rows(db, "SELECT * FROM outcome_links")) == 2
    assert store.count_evaluations() == 1


def _send_pickled(broker_url: str, snapshot: Snapshot) -> None:
    sender = Celery("pickler", broker=broker_url, set_as_current=False)
    sender.conf.update(task_serializer="pickle", accept_content=["pickle"])
    sender.send_task(
        EVALUATE_TASK,
        args=(snapshot.wire(),),
        queue=LANE_QUEUES[Lane.LIVE],
        exchange=LANE_EXCHANGE,
        routing_key=LANE_QUEUES[Lane.LIVE],
    )
    sender.close()


def test_undecodable_messages_become_dead_letters_and_worker_keeps_serving(
    redis_url: str,
    sqlite_url: str,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """Pickle, malformed JSON, bad schema, window violation: dead letters; the worker goes on."""
    worker = start_worker(broker_url=redis_url, store_url=sqlite_url)
    examples = example_snapshots()
    producer = producer_for(redis_url)
    _send_pickled(redis_url, examples["order-42"])
    publish_raw(redis_url, '{"broken": ', "application/json", task_headers(EVALUATE_TASK))
    future = examples["care-no-tools"].wire()
    producer.send_raw(EVALUATE_TASK, {**future, "schema_version": 2}, lane=Lane.LIVE)
    leaky = {**future, "window": {**future["window"], "cutoff_event_id": future["events"][0]["id"]}}
    producer.send_raw(EVALUATE_TASK, leaky, lane=Lane.LIVE)
    valid = examples["store-hours-grounded"]
    producer.enqueue(valid)

    store = open_test_store(sqlite_url)
    wait_until(lambda: store.count_evaluations() == 1, 20, "the valid snapshot's evaluation")
    wait_until(lambda: len(store.open_dead_letters()) == 4, 20, "four dead letters")
    dead = {d.reason: d for d in store.open_dead_letters()}
    assert set(dead) == {
        "CONTENT_DISALLOWED",
        "UNDECODABLE",
        "UNSUPPORTED_SCHEMA_VERSION",
        "WINDOW_VIOLATION",
    }
    assert dead["UNDECODABLE"].payload == b'{"broken": '
    assert dead["CONTENT_DISALLOWED"].task == EVALUATE_TASK
    assert dead["WINDOW_VIOLATION"].lane == "live"
    assert _only_evaluation(store).record.snapshot_id == valid.snapshot_id
    for content in ("Louisville", "Larimer", "sleeping bag", "broken"):  # logs hold codes only
        assert content not in worker.log
    assert "dead letter: CONTENT_DISALLOWED" in worker.log


def test_redrive_reenqueues_dead_letters_that_decode_now(
    redis_url: str,
    sqlite_url: str,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """Unknown-task messages holding a snapshot or a tally are redriven and land; garbage stays."""
    start_worker(broker_url=redis_url, store_url=sqlite_url)
    snapshot = example_snapshots()["order-42"]
    now = datetime.now(UTC)
    row = TallyRow(rule="r", rate=0.5, lane=Lane.LIVE, seen=4, sampled=1)
    tally = SamplingTally(
        tally_id="t-redrive", producer="p", started_at=now, ended_at=now, rows=(row,)
    )
    producer = producer_for(redis_url)
    producer.send_raw("evalq.evaluate_v0", snapshot.wire(), lane=Lane.LIVE)
    producer.send_raw("evalq.sampling_tally_v0", tally.wire(), lane=Lane.OUTCOMES)
    publish_raw(redis_url, "not json at all", "application/json", task_headers(EVALUATE_TASK))
    store = open_test_store(sqlite_url)
    wait_until(lambda: len(store.open_dead_letters()) == 3, 20, "three dead letters")
    assert {d.reason for d in store.open_dead_letters()} == {"UNKNOWN_TASK", "UNDECODABLE"}

    summary = redrive(store, producer, batch_size=4)
    assert (summary.examined, summary.redriven, summary.still_invalid) == (3, 2, 1)
    wait_until(lambda: store.count_evaluations() == 1, 20, "the redriven evaluation")
    wait_until(lambda: len(store.sampled_out_counts()) == 1, 20, "the redriven tally")
    assert store.sampled_out_counts()[0].sampled_out == 3
    assert _only_evaluation(store).record.snapshot_id == snapshot.snapshot_id
    assert [d.reason for d in store.open_dead_letters()] == ["UNDECODABLE"]
    assert redrive(store, producer, reason="UNKNOWN_TASK").examined == 0


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] == name and all(part in head for part in wanted.split(",")):
            return float(value)
    return 0.0


def _scrape(port: int) -> str:
    """The text a worker's ``/metrics`` on ``port`` serves now."""
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def test_worker_serves_metrics_for_its_evaluations_and_dead_letters(
    redis_url: str,
    sqlite_url: str,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
    open_test_store: Callable[[str], Store],
) -> None:
    """EVALQ_METRICS_PORT: /metrics counts evaluations, queue waits, dead letters and loop lag."""
    # The loop lag samples come from every consumer process.
    port = free_port()
    start_worker(broker_url=redis_url, store_url=sqlite_url, metrics_port=str(port))
    producer = producer_for(redis_url)
    producer.enqueue(example_snapshots()["order-42"])
    producer.send_raw(EVALUATE_TASK, {"not": "a snapshot"}, lane=Lane.LIVE)
    store = open_test_store(sqlite_url)
    wait_until(lambda: len(store.open_dead_letters()) == 1, 20, "the dead letter")
    wait_until(lambda: store.count_evaluations() == 1, 20, "the evaluation")

    wait_until(lambda: _sample(_scrape(port), "evalq_evaluations_total") >= 1, 10, "the counter")
    text = _scrape(port)
    assert _sample(text, "evalq_queue_wait_seconds_count", lane="live") == 2
    assert _sample(text, "evalq_dead_letters_total", reason="SCHEMA_INVALID") == 1
    assert _sample(text, "evalq_judge_requests_total", status="ok") == 1
    assert _sample(text, "evalq_loop_lag_seconds_count") > 0  # sampled every 50 ms
    assert "evalq_overload_timeouts_total" not in text  # no TIMEOUT at all, no child yet


def test_worker_counts_every_judge_http_response_by_status_class(
    redis_url: str,
    sqlite_url: str,
    judge_server: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
    producer_for: Callable[..., Producer],
) -> None:
    """A System One judge answering 429 once: /metrics counts that 429 and the 2xx retries."""
    port = free_port()
    judge_server.script(status(429, retry_after=0))
    knobs = systemone_knobs(judge_server.base_url, sqlite_url, redis_url)
    start_worker(**knobs, metrics_port=str(port))
    producer_for(redis_url).enqueue(example_snapshots()["order-42"])

    wait_until(lambda: _sample(_scrape(port), "evalq_evaluations_total") >= 1, 30, "the evaluation")
    text = _scrape(port)
    assert _sample(text, "evalq_judge_http_responses_total", code="429") == 1
    assert _sample(text, "evalq_judge_http_responses_total", code="2xx") == judge_server.count - 1
