"""The metric set a handled snapshot is evaluated with: the default by unit, a named set kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from producer import Lane, Snapshot, read_snapshots
from producer.snapshot import EVALUATE_TASK
from tests.queue.queue_kit import EXAMPLES
from worker import runtime
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler, Verdict
from worker.judges import SyntheticJudge
from worker.metric_sets import judge_free_metric_ids, reported_metric_ids
from worker.producing import with_metric_set
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import Store, open_store


@pytest.fixture
def store(workdir: Path) -> Iterator[Store]:
    """A SQLite store of this test."""
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as opened:
        yield opened


def _handled(store: Store, snapshots: list[Snapshot]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Handle ``snapshots`` in process; {snapshot id: (metric set, metric ids)} as recorded."""
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    deliveries = [
        Delivery(EVALUATE_TASK, (s.wire(),), {}, Lane.LIVE, raw_bytes(s.wire())) for s in snapshots
    ]
    try:
        with runtime.use(rt):
            verdicts = rt.call(Handler(rt).handle(deliveries), timeout_s=30.0)
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK] * len(snapshots)
    recorded = {}
    for row in store.iter_evaluation_rows():
        stored = store.find_evaluation(row.snapshot_id, row.metric_set_version)
        assert stored is not None
        ids = tuple(r.metric_id for r in stored.record.results)
        recorded[row.snapshot_id] = (stored.record.metric_set, ids)
    return recorded


def test_a_tool_call_unit_naming_the_default_set_gets_the_tool_call_set(store: Store) -> None:
    """unit tool_call + set agent (the default) → tool_call; another named set is kept."""
    call = next(iter(read_snapshots(EXAMPLES, unit="tool_call")))
    invocation = next(iter(read_snapshots(EXAMPLES)))
    named = with_metric_set(call, "agent+trajectory")
    recorded = _handled(store, [call, named, invocation])
    assert recorded[call.snapshot_id] == ("tool_call", ("call_appropriate", "call_valid"))
    kept_set, kept_ids = recorded[named.snapshot_id]
    assert (kept_set, kept_ids[-1]) == ("agent+trajectory", "trajectory_match")
    agent_set, agent_ids = recorded[invocation.snapshot_id]
    assert (agent_set, agent_ids[-1], len(agent_ids)) == ("agent", "tool_execution", 8)


def test_judge_free_metric_ids_are_the_metrics_that_ask_nothing() -> None:
    """tool_execution, trajectory_match and call_valid never ask the judge; the judged ones do."""
    assert judge_free_metric_ids() == {"tool_execution", "trajectory_match", "call_valid"}
    assert judge_free_metric_ids() < set(reported_metric_ids())
