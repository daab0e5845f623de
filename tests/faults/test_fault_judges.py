"""Judge faults, mixed, through real workers: the right status and reason per metric, usage kept.

One worker per judge kind talks to the fake judge server, one snapshot at a time, so each
snapshot meets exactly the faults scripted for it. The first snapshot of each run meets no fault:
it tells which metrics ask the judge (the others must come out the same whatever the judge does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from producer import Lane, Producer, Snapshot
from tests.faults.conftest import StartWorker
from tests.faults.fault_kit import AGENT_METRICS, FaultWorker, redone, report_row, store_rows, tally
from tests.queue.queue_kit import example_snapshots, wait_until
from worker.judges.testing import (
    Fault,
    JudgeServer,
    drop,
    duplicate_key,
    edit,
    edit_content,
    finish_reason,
    invalid_json,
    stall,
    status,
)
from worker.store import MetricResultRecord, Store, StoredEvaluation, UsageRecord, open_store

pytestmark = pytest.mark.services

BUDGET_S = 3.0
JUDGED = ("DECIDED", "INCONCLUSIVE")
"""Statuses of a metric whose judge request was answered properly."""


@dataclass(frozen=True)
class Case:
    """A fault script, what every judged metric must say, and what usage must be kept."""

    name: str
    faults: tuple[Fault, ...]
    outcome: tuple[str, str] | None  # (status, reason); None = answered normally
    usage: str  # "known" (counts kept), "unknown" (a reply, unreadable), "none" (no reply)
    attempts: int  # HTTP requests the judge server must have seen


def _drop_answer(reply: dict[str, Any]) -> dict[str, Any]:
    answers = dict(reply["answers"])
    answers.pop(sorted(answers)[0])
    return {**reply, "answers": answers}


def _nan_answer(reply: dict[str, Any]) -> dict[str, Any]:
    answers = dict(reply["answers"])
    qid = next(k for k, v in sorted(answers.items()) if v["type"] == "noul")
    answers[qid] = {**answers[qid], "noul": math.nan}
    return {**reply, "answers": answers}


def _out_of_range(reply: dict[str, Any]) -> dict[str, Any]:
    answers = dict(reply["answers"])
    qid = next(k for k, v in sorted(answers.items()) if v["type"] == "noul")
    answers[qid] = {**answers[qid], "noul": 1.5}
    return {**reply, "answers": answers}


def _drop_content_key(content: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in content.items() if k != sorted(content)[0]}


def _nan_content(content: dict[str, Any]) -> dict[str, Any]:
    qid = next(k for k, v in sorted(content.items()) if not isinstance(v, dict))
    return {**content, qid: math.nan}


BAD = "INVALID_RESPONSE"
SYSTEMONE_CASES = (
    Case("no fault", (), None, "known", 1),
    Case("429 + Retry-After", (status(429, retry_after=0.3),), None, "known", 2),
    Case("500 then 529", (status(500), status(529)), None, "known", 3),
    Case("connection reset", (drop(),), None, "known", 2),
    Case("503 x3 (attempts spent)", (status(503),) * 3, ("ERROR", "BACKEND_ERROR"), "none", 3),
    Case("401 (not retried)", (status(401),), ("ERROR", "BACKEND_ERROR"), "none", 1),
    Case("stall past the budget", (stall(),), ("ERROR", "TIMEOUT"), "none", 1),
    Case("invalid JSON", (invalid_json(),), ("ERROR", BAD), "unknown", 1),
    Case("missing question", (edit(_drop_answer),), ("ERROR", BAD), "known", 1),
    Case("NaN on the wire", (edit(_nan_answer),), ("ERROR", BAD), "unknown", 1),
    Case("probability 1.5", (edit(_out_of_range),), ("ERROR", BAD), "known", 1),
    Case("duplicate key", (duplicate_key(),), ("ERROR", BAD), "unknown", 1),
)
CHAT_CASES = (
    Case("no fault", (), None, "known", 1),
    Case("429 + Retry-After", (status(429, retry_after=0.3),), None, "known", 2),
    Case("finish_reason length", (finish_reason("length"),), ("ERROR", BAD), "known", 1),
    Case("missing question", (edit_content(_drop_content_key),), ("ERROR", BAD), "known", 1),
    Case("NaN in the content", (edit_content(_nan_content),), ("ERROR", BAD), "known", 1),
    Case("invalid JSON", (invalid_json(),), ("ERROR", BAD), "unknown", 1),
    Case("stall past the budget", (stall(),), ("ERROR", "TIMEOUT"), "none", 1),
)


@pytest.fixture
def store_of(workdir: Path) -> Iterator[Callable[[str], Store]]:
    """Factory: an open store for a URL (closed at the end)."""
    opened: list[Store] = []

    def open_(url: str) -> Store:
        opened.append(open_store(url))
        return opened[-1]

    yield open_
    for store in opened:
        store.close()


def _evaluation(store: Store, url: str, snapshot_id: str) -> StoredEvaluation | None:
    rows = store_rows(
        url, f"SELECT evaluation_id FROM evaluations WHERE snapshot_id = '{snapshot_id}'"
    )
    return store.get_evaluation(str(rows[0][0])) if rows else None


def _recorded(store: Store, url: str, snapshot_id: str) -> Callable[[], bool]:
    return lambda: _evaluation(store, url, snapshot_id) is not None


def _check_usage(case: Case, usage: tuple[UsageRecord, ...]) -> None:
    if case.usage == "none":
        assert usage == (), case.name  # no reply arrived: nothing to account for, never zero
    elif case.usage == "unknown":
        assert [u.usage for u in usage] == [None], case.name  # a reply, its counts unreadable
    else:
        assert len(usage) == 1, case.name
        assert usage[0].usage is not None, case.name
        assert usage[0].usage["input_tokens"] > 0, case.name


def _check_results(
    case: Case,
    results: tuple[MetricResultRecord, ...],
    judged: frozenset[str],
    baseline: dict[str, MetricResultRecord],
) -> None:
    for result in results:
        if result.metric_id not in judged:  # untouched by whatever the judge did
            got, want = result, baseline[result.metric_id]
            assert (got.status, got.reason, got.score) == (want.status, want.reason, want.score)
        elif case.outcome is None:
            assert result.status in JUDGED, (case.name, result.metric_id, result.reason)
        else:
            assert (result.status, result.reason) == case.outcome, (case.name, result.metric_id)
            assert result.judge_model is None or case.outcome[1] == BAD, case.name


def _run_cases(
    cases: tuple[Case, ...],
    kind: str,
    worker: FaultWorker,
    judge: JudgeServer,
    producer: Producer,
    store: Store,
    url: str,
) -> list[Snapshot]:
    base = example_snapshots()["order-42"]
    sent: list[Snapshot] = []
    judged: frozenset[str] = frozenset()
    baseline: dict[str, MetricResultRecord] = {}
    for index, case in enumerate(cases):
        snapshot = Snapshot.model_validate({**base.wire(), "trace_id": f"judge-{kind}-{index}"})
        before = judge.count
        judge.script(*case.faults)
        producer.enqueue(snapshot, lane=Lane.LIVE)
        sent.append(snapshot)
        wait_until(_recorded(store, url, snapshot.snapshot_id), 20, case.name)
        stored = _evaluation(store, url, snapshot.snapshot_id)
        assert stored is not None
        record = stored.record
        if index == 0:
            judged = frozenset(r.metric_id for r in record.results if r.question_ids)
            baseline = {r.metric_id: r for r in record.results}
            assert judged, "the baseline snapshot must ask the judge"
        assert record.requests == 1, case.name
        assert judge.count - before == case.attempts, case.name
        _check_usage(case, record.usage)
        _check_results(case, record.results, judged, baseline)
    assert "Traceback" not in worker.log
    return sent


@pytest.mark.parametrize("kind", ["systemone", "chat"])
def test_mixed_judge_faults_give_the_right_status_reason_and_usage(
    kind: str,
    redis_url: str,
    workdir: Path,
    judge_server: JudgeServer,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
    store_of: Callable[[str], Store],
) -> None:
    """Each judge fault through a real worker: per-metric status and reason, usage where kept."""
    url = f"sqlite:///{workdir / f'{kind}.db'}"
    judge = {"judge": kind, "judge_api_key": "fault-suite-key", "thresholds": "0.2,0.8"}
    if kind == "chat":
        judge.update(judge_url=f"{judge_server.base_url}/v1", judge_model="fault-llm")
    else:
        judge.update(judge_url=judge_server.base_url)
    worker = start_worker(
        broker_url=redis_url,
        store_url=url,
        budget_s=str(BUDGET_S),
        concurrency="1",
        batch_size="1",
        **judge,
    )
    cases = SYSTEMONE_CASES if kind == "systemone" else CHAT_CASES
    store = store_of(url)
    sent = _run_cases(cases, kind, worker, judge_server, producer_for(redis_url), store, url)

    counts = tally(url, [s.snapshot_id for s in sent], AGENT_METRICS)
    extra = redone(judge_server.count, url, [worker])
    row = report_row(counts.counts(f"judge faults mixed ({kind}, {len(cases)} kinds)", extra))
    assert (row.lost, row.duplicated, counts.invented, counts.incomplete) == (0, 0, 0, 0)
    assert row.recorded == len(cases)
