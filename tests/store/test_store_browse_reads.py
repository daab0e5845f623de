"""The result browser's bounded reads (``evalq ui``), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.store._store_helpers import evaluation_record, wire
from worker.store import (
    RecordScope,
    ResultFilter,
    ResultListRow,
    SnapshotRecord,
    Store,
    open_store,
)
from worker.store._browse import _LIST, MAX_PAGE

SCORES = (0.9, 0.1, 0.95, 0.2, 0.3, 0.85, 0.05)
"""Seven evaluations: a score below 0.8 fails groundedness (four fail, three pass)."""


def _fill(store: Store) -> list[str]:
    ids = []
    for n, score in enumerate(SCORES):
        content = wire(f"t-{n}", text=f"question {n}")
        content["slice"] = {"agent_version": "v2" if n % 2 else "v1", "environment": "prod"}
        snapshot = SnapshotRecord(content=content)
        written = store.record_evaluation(
            evaluation_record(snapshot.snapshot_id, score=score), snapshot
        )
        ids.append(written.id)
    return ids


def _walk(store: Store, chosen: ResultFilter, scope: RecordScope | None = None) -> list[str]:
    """Every page of size 2, following the cursor; the trace ids in page order."""
    seen: list[ResultListRow] = []
    cursor: int | None = None
    while True:
        page, cursor = store.result_list(chosen, scope, before=cursor, limit=2)
        assert len(page) <= 2
        seen.extend(page)
        if cursor is None:
            break
    return [row.trace_id for row in seen]


def test_result_pages_walk_newest_first_without_gaps_or_repeats(store: Store) -> None:
    """Keyset pages of one metric cover every match once, newest evaluation first."""
    _fill(store)
    failed = ResultFilter(metric_id="groundedness", status="DECIDED", passed=False)
    assert _walk(store, failed) == ["t-6", "t-4", "t-3", "t-1"]
    everything = _walk(store, ResultFilter(metric_id="groundedness"))
    assert everything == [f"t-{n}" for n in reversed(range(len(SCORES)))]
    skipped = _walk(store, ResultFilter(metric_id="tool_use", reason="NO_TOOL_RESULTS"))
    assert len(skipped) == len(SCORES)
    assert _walk(store, ResultFilter(metric_id="tool_use", status="ERROR")) == []


def test_result_pages_narrow_by_scope_and_show_the_row(store: Store) -> None:
    """A slice scope narrows the list; a row carries unit, verdict, score and slice."""
    _fill(store)
    v2 = RecordScope(agent_version="v2")
    assert _walk(store, ResultFilter(metric_id="groundedness"), v2) == ["t-5", "t-3", "t-1"]
    page, cursor = store.result_list(ResultFilter(metric_id="groundedness"), limit=1)
    (row,) = page
    assert cursor == row.seq
    assert (row.trace_id, row.unit_kind, row.status, row.passed, row.score) == (
        "t-6",
        "invocation",
        "DECIDED",
        False,
        0.05,
    )
    assert (row.agent_version, row.environment, row.metric_set_version) == ("v1", "prod", "agent@1")


def test_page_size_is_bounded(store: Store) -> None:
    """A page larger than MAX_PAGE (or empty) is refused, not served."""
    with pytest.raises(ValueError, match="limit"):
        store.result_list(ResultFilter(metric_id="groundedness"), limit=MAX_PAGE + 1)
    with pytest.raises(ValueError, match="limit"):
        store.result_list(ResultFilter(metric_id="groundedness"), limit=0)


def test_verdict_counts_split_decided_results_by_verdict(store: Store) -> None:
    """Grouped counts per (metric, status, reason, passed) add up to every result."""
    _fill(store)
    counts = {(c.metric_id, c.status, c.reason, c.passed): c.n for c in store.verdict_counts()}
    assert counts == {
        ("groundedness", "DECIDED", "DECIDED", True): 3,
        ("groundedness", "DECIDED", "DECIDED", False): 4,
        ("helpfulness", "ERROR", "TIMEOUT", None): 7,
        ("tool_use", "SKIPPED", "NO_TOOL_RESULTS", None): 7,
    }
    v1 = {
        (c.metric_id, c.passed): c.n for c in store.verdict_counts(RecordScope(agent_version="v1"))
    }
    assert (v1[("groundedness", True)], v1[("groundedness", False)]) == (2, 2)


def test_snapshot_index_and_its_evaluations(store: Store) -> None:
    """A snapshot's indexed facts, and its evaluations in order with the re-evaluation's link."""
    snapshot = SnapshotRecord(content=wire("t-re"))
    first = store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot).id
    again = evaluation_record(snapshot.snapshot_id, version="agent@2")
    second = store.record_evaluation(again, snapshot).id
    index = store.snapshot_index(snapshot.snapshot_id)
    assert index is not None
    assert (index.trace_id, index.unit_kind, index.window_rule, index.cutoff_event_id) == (
        "t-re",
        "invocation",
        "invocation_end",
        "a1",
    )
    assert index.has_content
    assert store.snapshot_index("0" * 64) is None
    links = store.snapshot_evaluations(snapshot.snapshot_id)
    assert [(e.evaluation_id, e.previous_evaluation_id) for e in links] == [
        (first, None),
        (second, first),
    ]
    assert len(store.snapshot_evaluations(snapshot.snapshot_id, limit=1)) == 1


def test_sqlite_result_page_walks_indexes_not_tables(tmp_path: Path) -> None:
    """The list query searches the primary key and (evaluation, metric) index: no scan, no sort."""
    # No scan of metric_results and no sort of all matches: a page costs the same at 1M records.
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    with open_store(url) as store:
        _fill(store)
    where = "r.status = :f_status AND r.passed = :f_passed AND e.seq < :before AND 1 = 1"
    params = {"metric_id": "g", "f_status": "DECIDED", "f_passed": 0, "before": 9, "limit": 50}
    with closing(sqlite3.connect(tmp_path / "plan.db")) as conn:
        conn.execute("ANALYZE")
        plan = [
            row[3]
            for row in conn.execute(f"EXPLAIN QUERY PLAN {_LIST.format(where=where)}", params)
        ]
    assert any("SEARCH e USING INTEGER PRIMARY KEY" in step for step in plan), plan
    assert any("SEARCH r USING INDEX" in step for step in plan), plan
    assert not any(step.startswith("SCAN") or "TEMP B-TREE" in step for step in plan), plan
