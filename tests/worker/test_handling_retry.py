"""Retry messages (``evalq.reevaluate``) on the message path in-process: the attempt's own id
for skip-if-done, idempotent redelivery, the link, another version, bad items."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from producer import Lane, Reevaluation, Snapshot
from producer.snapshot import EVALUATE_TASK, REEVALUATE_TASK
from tests.queue.queue_kit import example_snapshots, variants
from tests.worker.test_handling import CountingJudge
from worker import runtime
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler, Verdict
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import Store, evaluation_id_for, open_store


@pytest.fixture
def store(workdir: Path) -> Iterator[Store]:
    """A SQLite store of this test."""
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as opened:
        yield opened


def _delivery(task: str, item: Any) -> Delivery:
    return Delivery(task, (item,), {}, Lane.BACKFILL, raw_bytes(item))


def _handle(rt: Runtime, deliveries: list[Delivery]) -> list[Verdict]:
    with runtime.use(rt):
        return rt.call(Handler(rt).handle(deliveries), timeout_s=30.0)


def _snapshot(prefix: str) -> Snapshot:
    return variants(example_snapshots()["store-hours-grounded"], 1, prefix)[0]


def _version(rt: Runtime) -> str:
    metric_set, _ = rt.metric_set("agent")
    return metric_set.version


def test_a_retry_is_recorded_once_as_its_attempt_and_linked(store: Store) -> None:
    """Attempt 2 gets its own record linked to attempt 1; copies ask no judge; no send added."""
    judge = CountingJudge(delay_s=0.0)
    rt = Runtime(load_settings(processes=1), store=store, judge=judge)
    snapshot = _snapshot("retry")
    try:
        version = _version(rt)
        item = Reevaluation(snapshot=snapshot, metric_set_version=version, attempt=2).wire()
        first = _handle(rt, [_delivery(EVALUATE_TASK, snapshot.wire())])
        retried = _handle(rt, [_delivery(REEVALUATE_TASK, item)])
        calls = judge.calls
        again = _handle(rt, [_delivery(REEVALUATE_TASK, item), _delivery(REEVALUATE_TASK, [item])])
    finally:
        rt.close()
    assert first == retried == [Verdict.ACK]
    assert again == [Verdict.ACK, Verdict.ACK]
    assert judge.calls == calls  # skip-if-done found attempt 2's id
    assert store.count_evaluations() == 2
    second = store.get_evaluation(evaluation_id_for(snapshot.snapshot_id, version, "attempt:2"))
    assert second is not None
    assert second.record.run == "attempt:2"
    assert second.record.lane == "backfill"
    assert second.previous_evaluation_id == evaluation_id_for(snapshot.snapshot_id, version)
    assert len(store.sends(snapshot.snapshot_id)) == 1  # the first send only: a retry is none


def test_a_retry_for_another_version_is_this_versions_first_attempt(store: Store) -> None:
    """A retry naming a version this worker does not compute is attempt 1 of its own version."""
    rt = Runtime(load_settings(processes=1), store=store, judge=CountingJudge(delay_s=0.0))
    snapshot = _snapshot("other")
    try:
        version = _version(rt)
        item = Reevaluation(snapshot=snapshot, metric_set_version="agent@0", attempt=3).wire()
        verdicts = _handle(rt, [_delivery(REEVALUATE_TASK, item)])
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK]
    stored = store.find_evaluation(snapshot.snapshot_id, version)
    assert stored is not None
    assert stored.record.run == ""
    assert store.count_evaluations() == 1


def test_a_bad_retry_item_is_a_dead_letter_alone(store: Store) -> None:
    """attempt 1 (not a retry) and a bare snapshot are SCHEMA_INVALID; the good sibling lands."""
    rt = Runtime(load_settings(processes=1), store=store, judge=CountingJudge(delay_s=0.0))
    snapshot = _snapshot("bad")
    try:
        version = _version(rt)
        good = Reevaluation(snapshot=snapshot, metric_set_version=version, attempt=2).wire()
        first_attempt = dict(good, attempt=1)
        (verdict,) = _handle(
            rt, [_delivery(REEVALUATE_TASK, [first_attempt, snapshot.wire(), good])]
        )
    finally:
        rt.close()
    assert verdict is Verdict.ACK
    assert sorted(d.reason for d in store.open_dead_letters()) == ["SCHEMA_INVALID"] * 2
    assert store.count_evaluations() == 1
    assert store.newest_evaluation(snapshot.snapshot_id, version) is not None
