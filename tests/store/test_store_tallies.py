"""Sampling tallies (stored once per tally id, summed per rule and slice) and backfill counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from tests.store._store_helpers import (
    dump_tables,
    evaluation_record,
    raw_connection,
    send_record,
    wire,
)
from worker.store import (
    EvaluationRecord,
    MetricResultRecord,
    SnapshotRecord,
    Store,
    TallyRecord,
    TallyRowRecord,
    open_store,
)
from worker.store._schema import SCHEMA_VERSION, statements

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _row(
    rule: str = "default",
    *,
    seen: int,
    sampled: int,
    rate: float = 0.5,
    lane: str = "live",
    agent_version: str | None = None,
) -> TallyRowRecord:
    return TallyRowRecord(
        rule=rule, rate=rate, lane=lane, agent_version=agent_version, seen=seen, sampled=sampled
    )


def _tally(tally_id: str, *rows: TallyRowRecord, minutes: int = 0) -> TallyRecord:
    start = T0 + timedelta(minutes=minutes)
    return TallyRecord(
        tally_id=tally_id,
        producer="host:1",
        started_at=start,
        ended_at=start + timedelta(minutes=1),
        rows=rows,
    )


def _totals(store: Store, **filters: object) -> dict[tuple[object, ...], tuple[int, int, int]]:
    counts = store.sampled_out_counts(**filters)  # type: ignore[arg-type]
    return {
        (c.rule, c.rate, c.lane, c.agent_version): (c.seen, c.sampled, c.sampled_out)
        for c in counts
    }


def test_tallies_sum_per_rule_rate_lane_and_slice(store: Store) -> None:
    """Rows of several tallies add up per (rule, rate, lane, slice); a None slice is its own."""
    first = _tally(
        "tally-1",
        _row(seen=10, sampled=5),
        _row(seen=4, sampled=4, agent_version="v2"),
        _row("canary", seen=3, sampled=3, rate=1.0),
    )
    second = _tally("tally-2", _row(seen=6, sampled=2), _row(seen=1, sampled=0, agent_version="v2"))
    assert store.record_tally(first).created
    assert store.record_tally(second).created
    assert _totals(store) == {
        ("canary", 1.0, "live", None): (3, 3, 0),
        ("default", 0.5, "live", None): (16, 7, 9),
        ("default", 0.5, "live", "v2"): (5, 4, 1),
    }


def test_a_rule_whose_rate_changed_keeps_both_rates_apart(store: Store) -> None:
    """Counts under different rates of one rule are not merged (their weights differ)."""
    store.record_tally(_tally("t-a", _row(seen=10, sampled=1, rate=0.1)))
    store.record_tally(_tally("t-b", _row(seen=10, sampled=5, rate=0.5)))
    assert _totals(store) == {
        ("default", 0.1, "live", None): (10, 1, 9),
        ("default", 0.5, "live", None): (10, 5, 5),
    }


def test_a_redelivered_tally_writes_nothing(store_url: str, store: Store) -> None:
    """The same tally id again (at-least-once delivery) creates nothing; rows stay unchanged."""
    tally = _tally("tally-again", _row(seen=8, sampled=2), _row("x", seen=1, sampled=1))
    assert store.record_tally(tally).created
    before = dump_tables(store_url)
    again = store.record_tally(tally)
    assert again == (tally.tally_id, False)
    assert dump_tables(store_url) == before
    assert _totals(store)[("default", 0.5, "live", None)] == (8, 2, 6)


def test_a_new_tally_id_with_the_same_counts_adds_them(store: Store) -> None:
    """Deduplication is by tally id, not by content: two drains with equal counts both count."""
    store.record_tally(_tally("drain-1", _row(seen=5, sampled=1)))
    store.record_tally(_tally("drain-2", _row(seen=5, sampled=1)))
    assert _totals(store) == {("default", 0.5, "live", None): (10, 2, 8)}


def test_counts_filter_by_lane_and_tally_end_time(store: Store) -> None:
    """``lane`` keeps one lane; ``since``/``until`` bound the tallies' end time."""
    store.record_tally(_tally("early", _row(seen=2, sampled=1), minutes=0))
    store.record_tally(_tally("late", _row(seen=7, sampled=3), minutes=10))
    store.record_tally(_tally("bf", _row("backfill:x", seen=4, sampled=4, lane="backfill")))
    assert set(_totals(store, lane="backfill")) == {("backfill:x", 0.5, "backfill", None)}
    late = _totals(store, lane="live", since=T0 + timedelta(minutes=5))
    assert late == {("default", 0.5, "live", None): (7, 3, 4)}
    early = _totals(store, until=T0 + timedelta(minutes=5), lane="live")
    assert early == {("default", 0.5, "live", None): (2, 1, 1)}


def test_invalid_tallies_are_refused_before_the_database() -> None:
    """More sampled than seen, or one slice twice in a tally, is a validation error."""
    with pytest.raises(ValidationError):
        _row(seen=1, sampled=2)
    with pytest.raises(ValidationError):
        _tally("dup", _row(seen=1, sampled=1), _row(seen=2, sampled=1))


def _snapshot(trace_id: str, rule: str) -> SnapshotRecord:
    sampling = {"lane": "backfill", "rate": 1.0, "weight": 1.0, "rule": rule}
    return SnapshotRecord(content={**wire(trace_id), "sampling": sampling})


def _clean_evaluation(snapshot_id: str) -> EvaluationRecord:
    """An evaluation with no ERROR result."""
    skipped = MetricResultRecord(
        metric_id="groundedness", metric_version="3", status="SKIPPED", reason="NO_CLAIMS"
    )
    return evaluation_record(snapshot_id).model_copy(update={"results": (skipped,)})


def test_backfill_counts_evaluated_and_failed_snapshots_of_one_backfill(store: Store) -> None:
    """Only rules ``backfill:<id>`` and ``backfill:<id>/…`` count; ERROR results are failures."""
    mine = [
        _snapshot("a", "backfill:bf-1"),
        _snapshot("b", "backfill:bf-1"),
        _snapshot("c", "backfill:bf-1/canary"),
    ]
    others = [
        _snapshot("d", "backfill:bf-10"),
        _snapshot("e", "backfill:bf-1-2"),
        _snapshot("f", "x"),
    ]
    for snapshot in [*mine, *others]:
        store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)  # has an ERROR
    store.put_snapshot(_snapshot("g", "backfill:bf-1"))  # not evaluated yet
    clean = _snapshot("h", "backfill:bf-1/default")
    store.record_evaluation(_clean_evaluation(clean.snapshot_id), clean)
    everything = [*mine, *others, _snapshot("g", "backfill:bf-1"), clean]
    store.record_sends([send_record(s, f"m-{n}") for n, s in enumerate(everything)])
    # A re-evaluation under a new metric-set version is still one snapshot evaluated.
    store.record_evaluation(evaluation_record(mine[0].snapshot_id, version="agent@2"))
    assert store.backfill_counts("bf-1") == (4, 3)
    assert store.backfill_counts("bf-10") == (1, 1)
    assert store.backfill_counts("unknown") == (0, 0)


def test_backfill_counts_find_units_sent_live_first(store: Store) -> None:
    """A unit evaluated from a live send counts for a backfill that sent it again later."""
    live = SnapshotRecord(content=wire("t-live"))
    store.record_evaluation(evaluation_record(live.snapshot_id), live)
    store.record_sends([send_record(live, "live-message")])
    assert store.backfill_counts("bf-late") == (0, 0)
    store.record_sends([send_record(live, "bf-message", rule="backfill:bf-late", lane="backfill")])
    assert store.backfill_counts("bf-late") == (1, 1)  # the fixture evaluation has an ERROR
    assert store.count_evaluations() == 1


def _create_version_1(url: str, dialect: str) -> None:
    """A database as schema version 1 left it: no tallies table, no rule index."""
    new = ("sampling_tallies", "snapshots_by_rule")
    with raw_connection(url) as conn:
        conn.execute("CREATE TABLE evalq_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        for sql in statements(dialect):  # type: ignore[arg-type]
            if not any(name in sql.split("(")[0] for name in new):
                conn.execute(sql)
        conn.execute("INSERT INTO evalq_schema VALUES (1, '2025-01-01T00:00:00+00:00')")


def test_a_version_1_database_is_upgraded_in_place(store_url: str) -> None:
    """Opening a version-1 store adds the tallies table (append-only) and records version 2."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    _create_version_1(store_url, dialect)
    with open_store(store_url) as upgraded:
        upgraded.record_tally(_tally("after-upgrade", _row(seen=3, sampled=1)))
        assert _totals(upgraded) == {("default", 0.5, "live", None): (3, 1, 2)}
        assert upgraded.migrate() is False
    with raw_connection(store_url) as conn:
        versions = sorted(v for (v,) in conn.execute("SELECT version FROM evalq_schema"))
        assert versions == [1, SCHEMA_VERSION]
        with pytest.raises(Exception, match="append-only"):
            conn.execute("DELETE FROM sampling_tallies")
