"""Tool-call evaluation end to end: `evalq worker`, `evalq enqueue`, Redis, a judge on loopback.

The same file is read twice: with ``--unit tool_call`` (one snapshot per proposed call, the
``tool_call`` set by default) and with the default unit (invocations, the ``agent`` set with
``tool_execution``). The records come from the worker's store; the judge's requests from the
judge server's own log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from producer import Snapshot, read_snapshots
from tests.evaluation.tool_call_kit import (
    FIRST_RESULT,
    SECOND_RESULT,
    bad_calls_record,
    orders_record,
)
from tests.queue.queue_kit import WorkerProcess, killed_on_exit, systemone_knobs, wait_until
from tests.queue.queue_kit import worker_env as env_of
from worker.judges.testing import JudgeServer
from worker.producing import with_metric_set
from worker.store import Store

pytestmark = pytest.mark.services

EVALQ = Path(sys.executable).with_name("evalq")


def _command() -> list[str]:
    return [str(EVALQ)] if EVALQ.exists() else [sys.executable, "-m", "producer.cli"]


def _enqueue(path: Path, *args: str, env: dict[str, str]) -> None:
    done = subprocess.run(
        [*_command(), "enqueue", str(path), *args],
        env=env_of(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _results(store: Store, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
    """(metric set, {metric id: result record}) of the snapshot's only evaluation."""
    (row,) = [r for r in store.iter_evaluation_rows() if r.snapshot_id == snapshot.snapshot_id]
    stored = store.find_evaluation(snapshot.snapshot_id, row.metric_set_version)
    assert stored is not None
    return stored.record.metric_set, {r.metric_id: r for r in stored.record.results}


def test_tool_call_and_invocation_records_through_a_real_worker(
    redis_url: str,
    sqlite_url: str,
    workdir: Path,
    judge_server: JudgeServer,
    open_test_store: Callable[[str], Store],
) -> None:
    """--unit tool_call: call_appropriate + call_valid records; default unit: tool_execution."""
    path = workdir / "calls.jsonl"
    records = (orders_record(), bad_calls_record())
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    env = systemone_knobs(judge_server.base_url, sqlite_url, redis_url)
    store = open_test_store(sqlite_url)
    with killed_on_exit(WorkerProcess) as started:
        worker = WorkerProcess(env_of(**env), workdir / "worker.log", [*_command(), "worker"])
        started.append(worker)
        worker.wait_ready()

        _enqueue(path, "--unit", "tool_call", env=env)
        wait_until(lambda: store.count_evaluations() == 4, 60, "four tool_call evaluations")
        tool_call_requests = judge_server.requests
        _enqueue(path, env=env)
        wait_until(lambda: store.count_evaluations() == 6, 60, "two invocation evaluations")

    # enqueue stamps the configured set (agent) on every snapshot it reads
    calls = [with_metric_set(s, "agent") for s in read_snapshots(path, unit="tool_call")]
    by_call = {s.unit.event_id: _results(store, s) for s in calls}
    assert {name for name, _ in by_call.values()} == {"tool_call"}  # the default for the unit
    assert all(set(r) == {"call_appropriate", "call_valid"} for _, r in by_call.values())

    valid = {
        f"{s.trace_id}:{s.unit.call.tool_name}": by_call[s.unit.event_id][1]["call_valid"]
        for s in calls
        if s.unit.call is not None
    }
    assert len(valid) == 4
    first = valid["orders:lookup_order"]
    assert (first.status, first.label, first.passed) == ("DECIDED", "valid", True)
    assert valid["orders:cancel_order"].label == "valid"  # offered at the second model call
    assert valid["bad-calls:refund_order"].reason == "UNKNOWN_TOOL"
    assert valid["bad-calls:lookup_order"].reason == "SCHEMA_MISMATCH"
    for _, results in by_call.values():
        appropriate = results["call_appropriate"]
        assert appropriate.status == "DECIDED"
        assert appropriate.question_ids == ("call_appropriate.q",)

    # exactly one request per tool_call snapshot (call_valid asks nothing), none with its result
    assert len(tool_call_requests) == 4
    bodies = [r.json() for r in tool_call_requests]
    cancel_body = next(b for b in bodies if b["state"]["proposed_call"]["name"] == "cancel_order")
    assert SECOND_RESULT not in json.dumps(cancel_body)
    assert FIRST_RESULT in json.dumps(cancel_body)  # the lookup came before: visible
    lookup_body = next(
        b
        for b in bodies
        if b["state"]["proposed_call"]["name"] == "lookup_order"
        and b["state"]["request"].startswith("Cancel")
    )
    assert FIRST_RESULT not in json.dumps(lookup_body)

    invocations = [with_metric_set(s, "agent") for s in read_snapshots(path)]
    executions = {}
    for snapshot in invocations:
        name, results = _results(store, snapshot)
        assert name == "agent"
        assert "call_appropriate" not in results
        executions[snapshot.trace_id] = results["tool_execution"]
    orders = executions["orders"]
    assert (orders.status, orders.label, orders.reason) == ("DECIDED", "error", "CALL_ERROR")
    per_call = [(c["id"], c["label"]) for c in orders.evidence["calls"]]
    assert per_call == [("c1", "ok"), ("c2", "error")]
    assert orders.question_ids == ()  # deterministic: no judge question
    assert executions["bad-calls"].label == "error"
