"""`evalq report` counts each unit once per metric-set version (its newest evaluation), shows
versions side by side, pools them only with --pool-versions, and counts superseded
evaluations and duplicate sends beside — read from a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import backend_url
from tests.store._store_helpers import evaluation_record, send_record, snapshot_record
from worker.reporting import ReportScope, build_report, render_html, render_terminal
from worker.store import SnapshotRecord, Store, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty store on SQLite or on a fresh PostgreSQL schema."""
    with backend_url(request.param, request, tmp_path, "versions") as url, open_store(url) as s:
        yield s


def _units(store: Store, count: int) -> list[SnapshotRecord]:
    """``count`` units evaluated under agent@1 (groundedness failed: score 0.1), each sent live
    and under two backfill ids."""
    units = [snapshot_record(f"t-{n}") for n in range(count)]
    for unit in units:
        store.record_evaluation(evaluation_record(unit.snapshot_id, score=0.1), unit)
        store.record_sends(
            [
                send_record(unit, f"live-{n}")
                if n == 0
                else send_record(unit, f"bf-{n}", rule=f"backfill:bf-{n}", lane="backfill")
                for n in range(3)
            ]
        )
    return units


def test_each_unit_counts_once_with_its_newest_evaluation(store: Store) -> None:
    """Re-runs of a unit under one version: the newest counts; the rest are superseded."""
    units = _units(store, 6)
    for unit in units[:2]:  # re-evaluated: now passing groundedness
        store.record_evaluation(evaluation_record(unit.snapshot_id, run="r2", score=0.95))
    report = build_report(store, ReportScope())
    grounded = report.metrics["groundedness"]
    assert (report.snapshots, report.evaluations, report.superseded_evaluations) == (6, 6, 2)
    assert (grounded.passed, grounded.failed, grounded.pass_rate.denominator) == (2, 4, 6)
    assert (report.sends, report.duplicate_sends) == (18, 12)
    assert report.latency.n == 6
    backfill = build_report(store, ReportScope(backfill_id="bf-1"))
    assert (backfill.evaluations, backfill.metrics["groundedness"].passed) == (6, 2)
    text = _plain(render_terminal(report))
    assert "2 superseded" in text
    assert "sends: 18 (12 duplicate)" in text


def _plain(renderable: object) -> str:
    from rich.console import Console  # noqa: PLC0415 - only this helper renders

    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_versions_are_side_by_side_and_pooled_only_when_asked(store: Store) -> None:
    """A threshold change (a new version) is its own column; --pool-versions pools and says so."""
    units = _units(store, 5)
    for unit in units[:3]:  # the new version re-judges three units: all pass
        store.record_evaluation(evaluation_record(unit.snapshot_id, version="agent@2"))
    report = build_report(store, ReportScope())
    assert not report.pooled
    assert report.metrics_version == "agent@2"  # it evaluated last
    columns = {v.metric_set_version: v for v in report.versions}
    assert {k: (v.evaluations, v.superseded) for k, v in columns.items()} == {
        "agent@1": (5, 0),
        "agent@2": (3, 0),
    }
    assert columns["agent@1"].metrics["groundedness"].pass_rate.numerator == 0
    assert columns["agent@2"].metrics["groundedness"].pass_rate.numerator == 3
    assert report.metrics["groundedness"].pass_rate.denominator == 3  # agent@2 alone
    assert any("side by side" in note for note in report.notes)
    assert "Metric-set versions side by side" in _plain(render_terminal(report))
    assert 'id="versions"' in render_html(report)

    pooled = build_report(store, ReportScope(pool_versions=True))
    assert (pooled.pooled, pooled.metrics_version) == (True, None)
    rate = pooled.metrics["groundedness"].pass_rate
    assert (rate.numerator, rate.denominator) == (3, 8)  # each unit once per version
    assert any(note.startswith("Pooled (--pool-versions)") for note in pooled.notes)
    assert "versions pooled (--pool-versions)" in _plain(render_terminal(pooled))

    only_v1 = build_report(store, ReportScope(metric_set_version="agent@1"))
    assert (only_v1.metrics_version, len(only_v1.versions)) == ("agent@1", 1)
    assert only_v1.metrics["groundedness"].pass_rate.denominator == 5
