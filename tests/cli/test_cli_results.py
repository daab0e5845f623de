"""`evalq results` in-process (Typer's runner) over a SQLite and a PostgreSQL store alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import backend_url
from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.cli import app
from worker.store import MetricResultRecord, Store, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file in tmp_path, or a fresh schema in the session's PostgreSQL database."""
    with backend_url(request.param, request, tmp_path, "results") as url:
        yield url


def _custom(snapshot_id: str) -> Any:
    """An evaluation whose one result carries a reason code of a custom metric's own."""
    record = evaluation_record(snapshot_id)
    extra = MetricResultRecord(
        metric_id="house_style", metric_version="1", status="SKIPPED", reason="NO_HOUSE_STYLE"
    )
    return record.model_copy(update={"results": (*record.results, extra)})


@pytest.fixture
def filled_url(any_store_url: str) -> str:
    """Three evaluations (3, 3 and 4 results), the newest with a custom metric's reason."""
    with open_store(any_store_url) as store:
        _record(store, "t-0", "u-0")
        _record(store, "t-1", "u-1")
        snapshot = snapshot_record("t-2", unit_event_id="u-2")
        store.record_evaluation(_custom(snapshot.snapshot_id), snapshot)
    return any_store_url


def _record(store: Store, trace_id: str, unit: str) -> None:
    snapshot = snapshot_record(trace_id, unit_event_id=unit)
    store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)


def _run(url: str, *argv: str) -> Any:
    return CliRunner().invoke(app, ["results", *argv], env={"EVALQ_STORE_URL": url})


def test_json_lines_newest_first_with_filters(filled_url: str) -> None:
    """--json prints one object per row, newest first; --status/--reason narrow the rows."""
    done = _run(filled_url, "--json", "--status", "error")
    assert done.exit_code == 0, done.output
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["trace_id"], r["unit_event_id"], r["reason"]) for r in rows] == [
        ("t-2", "u-2", "TIMEOUT"),
        ("t-1", "u-1", "TIMEOUT"),
        ("t-0", "u-0", "TIMEOUT"),
    ]
    assert {r["metric_set_version"] for r in rows} == {"agent@1"}
    assert "evidence" not in rows[0]  # ids and outcome only, never what the judge saw


def test_a_custom_metric_reason_in_the_store_is_accepted(filled_url: str) -> None:
    """A reason code no engine knows is listed when the store holds it, refused when not."""
    done = _run(filled_url, "--json", "--reason", "NO_HOUSE_STYLE")
    assert done.exit_code == 0, done.output
    assert [json.loads(x)["metric_id"] for x in done.stdout.splitlines()] == ["house_style"]
    missing = _run(filled_url, "--reason", "NO_SUCH_CODE")
    assert missing.exit_code == 2
    assert "--reason: unknown reason code NO_SUCH_CODE; known: " in missing.output
    assert "NO_HOUSE_STYLE" in missing.output


def test_limit_and_cursor_page_through_the_rows(filled_url: str) -> None:
    """--limit 5 gives five rows and the cursor; the next page holds the other five, no cursor."""
    first = _run(filled_url, "--json", "--limit", "5")
    assert first.exit_code == 0, first.output
    assert len(first.stdout.splitlines()) == 5
    cursor = first.stderr.split("--cursor ")[1].split()[0]
    rest = _run(filled_url, "--json", "--limit", "50", "--cursor", cursor)
    assert len(rest.stdout.splitlines()) == 5
    assert "--cursor" not in rest.stderr


def test_a_missing_sqlite_store_is_refused_not_created(tmp_path: Path) -> None:
    """A reader never creates a store: a missing file is NO_STORE, exit 2, and stays missing."""
    where = tmp_path / "absent.db"
    done = _run(f"sqlite:///{where}", "--json")
    assert done.exit_code == 2
    assert "NO_STORE" in done.output
    assert not where.exists()


def test_a_rerun_supersedes_the_earlier_results_unless_superseded_is_asked(
    any_store_url: str,
) -> None:
    """Each unit's newest evaluation per version is listed; --superseded lists the older too."""
    with open_store(any_store_url) as store:
        snapshot = snapshot_record("t-rerun", unit_event_id="u-r")
        first = evaluation_record(snapshot.snapshot_id, score=0.1)
        store.record_evaluation(first, snapshot)
        second = evaluation_record(snapshot.snapshot_id, run="attempt-2", score=0.95)
        store.record_evaluation(second)
    done = _run(any_store_url, "--json", "--status", "DECIDED")  # groundedness only
    assert done.exit_code == 0, done.output
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["evaluation_id"], r["passed"]) for r in rows] == [(second.evaluation_id, True)]
    every = _run(any_store_url, "--json", "--status", "DECIDED", "--superseded")
    assert every.exit_code == 0, every.output
    listed = [json.loads(line)["evaluation_id"] for line in every.stdout.splitlines()]
    assert listed == [second.evaluation_id, first.evaluation_id]
