"""Result listings behind `evalq results`, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.store import RecordScope, ResultCursor, ResultQuery, Store, open_store
from worker.store._listing import _LISTING, _conditions


def _fill(store: Store, traces: int = 4) -> list[str]:
    """``traces`` evaluations (three results each), recorded in order; their trace ids."""
    ids = []
    for n in range(traces):
        snapshot = snapshot_record(f"t-{n}", unit_event_id=f"u-{n}")
        store.record_evaluation(
            evaluation_record(snapshot.snapshot_id, score=0.9 if n % 2 else 0.5), snapshot
        )
        ids.append(f"t-{n}")
    return ids


def test_newest_first_with_unit_ids_and_version(store: Store) -> None:
    """Rows come newest evaluation first (last result first) with unit, snapshot and version."""
    _fill(store)
    page, cursor = store.list_results(ResultQuery(limit=4))
    assert cursor is not None
    assert [(r.trace_id, r.metric_id) for r in page] == [
        ("t-3", "helpfulness"),
        ("t-3", "tool_use"),
        ("t-3", "groundedness"),
        ("t-2", "helpfulness"),
    ]
    first = page[2]
    assert (first.unit_kind, first.unit_event_id, first.session_id) == (
        "invocation",
        "u-3",
        "session-1",
    )
    assert (first.status, first.reason, first.passed, first.score) == (
        "DECIDED",
        "DECIDED",
        True,
        0.9,
    )
    assert first.metric_set_version == "agent@1"
    assert len(first.snapshot_id) == 64


def test_pages_continue_before_the_cursor_until_the_last(store: Store) -> None:
    """Following cursors visits every result exactly once; the last page has no cursor."""
    _fill(store)
    seen: list[tuple[str, str]] = []
    before: ResultCursor | None = None
    pages = 0
    while True:
        page, before = store.list_results(ResultQuery(limit=5, before=before))
        seen.extend((r.trace_id, r.metric_id) for r in page)
        pages += 1
        if before is None:
            break
    assert pages == 3
    assert len(seen) == len(set(seen)) == 12
    assert ResultCursor.parse(str(ResultCursor(seq=7, position=2))) == ResultCursor(
        seq=7, position=2
    )


def test_filters_narrow_by_metric_status_reason_and_scope(store: Store) -> None:
    """metric, status, reason and a time scope each narrow the listing."""
    _fill(store)
    failed, _ = store.list_results(ResultQuery(metric_id="groundedness"))
    assert [r.passed for r in failed] == [True, False, True, False]
    errors, _ = store.list_results(ResultQuery(status="ERROR", reason="TIMEOUT"))
    assert [r.metric_id for r in errors] == ["helpfulness"] * 4
    none, cursor = store.list_results(ResultQuery(reason="NO_EVIDENCE"))
    assert (none, cursor) == ((), None)
    future = RecordScope(since=datetime.now(UTC) + timedelta(minutes=5))
    assert store.list_results(ResultQuery(scope=future)) == ((), None)
    assert store.recorded_reasons() == ("DECIDED", "NO_TOOL_RESULTS", "TIMEOUT")


def test_cursor_text_is_refused_unless_seq_colon_position() -> None:
    """A mistyped cursor is a ValueError naming the SEQ:POS form."""
    for text in ("", "12", "a:b", "1:2:3", "-1:0"):
        with pytest.raises(ValueError, match="SEQ:POS"):
            ResultCursor.parse(text)


def test_a_filtered_page_walks_evaluations_newest_first_without_sorting(tmp_path: Path) -> None:
    """SQLite's plan for a filtered page: evaluations outer, results by key, no temp B-tree."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    with open_store(url) as store:
        _fill(store, traces=1)
    query = ResultQuery(
        metric_id="groundedness",
        status="DECIDED",
        scope=RecordScope(since=datetime.now(UTC) - timedelta(hours=1)),
        before=ResultCursor(seq=9, position=1),
    )
    conditions, params = _conditions(query)
    sql = _LISTING.format(where=" AND ".join(conditions))
    with closing(sqlite3.connect(tmp_path / "plan.db")) as conn:
        plan = [
            row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", {**params, "limit": 51})
        ]
    assert plan[0].startswith(("SCAN e", "SEARCH e USING INTEGER PRIMARY KEY"))
    assert not any(step.startswith("SCAN r") for step in plan)
    assert not any("TEMP B-TREE" in step for step in plan)
