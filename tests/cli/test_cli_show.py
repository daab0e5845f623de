"""`evalq show` in-process (Typer's runner) over a SQLite and a PostgreSQL store alike."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import backend_url
from tests.store._store_helpers import (
    QUESTION_TEXTS,
    STATE_SHA256,
    evaluation_record,
    outcome_record,
    snapshot_record,
    twin_snapshots,
)
from worker.cli import app
from worker.cli._show import AMBIGUOUS_SNAPSHOT_ID, BAD_SNAPSHOT_ID
from worker.store import StoreCode, open_store, text_sha256


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file in tmp_path, or a fresh schema in the session's PostgreSQL database."""
    with backend_url(request.param, request, tmp_path, "show") as url:
        yield url


@pytest.fixture
def snapshot_id(any_store_url: str) -> str:
    """One snapshot with one evaluation (an audited result) and a linked outcome."""
    snapshot = snapshot_record(unit_event_id="u-1")
    with open_store(any_store_url) as store:
        record = evaluation_record(snapshot.snapshot_id, criteria=("chargeback",))
        store.record_evaluation(record, snapshot)
        store.record_outcome(outcome_record("o-1", unit_event_id="u-1"))
    return snapshot.snapshot_id


def _run(url: str, *argv: str) -> Any:
    return CliRunner().invoke(app, ["show", *argv], env={"EVALQ_STORE_URL": url})


def _json(url: str, wanted: str) -> dict[str, Any]:
    done = _run(url, wanted, "--json")
    assert done.exit_code == 0, done.output
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def test_json_holds_questions_digests_model_window_and_outcomes(
    any_store_url: str, snapshot_id: str
) -> None:
    """--json: per metric status, reason, score, exact question texts, state digest, model."""
    doc = _json(any_store_url, snapshot_id)
    assert doc["format_version"] == 1
    assert doc["snapshot"]["snapshot_id"] == snapshot_id
    assert doc["snapshot"]["content_kept"] is True
    (evaluation,) = doc["evaluations"]
    grounded, skipped, timed_out = evaluation["metrics"]
    verdict = (grounded["status"], grounded["reason"], grounded["score"])
    assert verdict == ("DECIDED", "DECIDED", 0.9)
    assert grounded["passed"] is True
    assert grounded["questions"] == [
        {"id": qid, "sha256": text_sha256(text), "text": text}
        for qid, text in zip(("q1", "q2"), QUESTION_TEXTS, strict=True)
    ]
    assert grounded["state_sha256"] == STATE_SHA256
    assert (grounded["judge_model"], grounded["judge_model_reported"]) == ("judge-m-2025", True)
    assert grounded["window"] == {
        "rule": "invocation_end",
        "cutoff_event_id": "a1",
        "cutoff_time": "2025-01-02T03:04:05+00:00",
    }
    assert (skipped["audited"], skipped["questions"], skipped["state_sha256"]) == (False, [], None)
    assert (timed_out["judge_model"], timed_out["judge_model_reported"]) == ("judge-m", False)
    assert [o["event_id"] for o in evaluation["outcomes"]] == ["o-1"]
    assert evaluation["outcomes"][0]["value"] == {"amount": 12.5}
    assert evaluation["pending_outcomes"] == ["chargeback"]
    assert doc["more_evaluations"] is False


def test_the_terminal_form_holds_the_question_texts(any_store_url: str, snapshot_id: str) -> None:
    """Without --json the exact question texts, digests and the outcome are printed."""
    done = _run(any_store_url, snapshot_id[:16])  # the prefix evalq results prints
    assert done.exit_code == 0, done.output
    for text in QUESTION_TEXTS:
        assert f"      {text}\n" in done.stdout
        assert f"sha256 {text_sha256(text)}" in done.stdout
    assert f"state sha256 {STATE_SHA256}" in done.stdout
    assert "judge model judge-m-2025 (reported by the judge)" in done.stdout
    assert "judge model judge-m (configured)" in done.stdout
    assert 'outcome refund_reversed = {"amount": 12.5}' in done.stdout
    assert "pending outcomes: chargeback" in done.stdout
    assert "content kept" in done.stdout


def test_after_a_purge_every_record_still_shows(any_store_url: str, snapshot_id: str) -> None:
    """evalq purge, then evalq show: same records and digests; texts and content marked expired."""
    before = _json(any_store_url, snapshot_id)
    time.sleep(0.01)
    purged = CliRunner().invoke(
        app,
        ["purge", "--content-before", datetime.now(UTC).isoformat()],
        env={"EVALQ_STORE_URL": any_store_url},
    )
    assert purged.exit_code == 0, purged.output
    assert "1 snapshot content(s)" in purged.stdout
    assert "2 question text(s)" in purged.stdout
    after = _json(any_store_url, snapshot_id)
    assert after["snapshot"]["content_kept"] is False
    grounded = after["evaluations"][0]["metrics"][0]
    assert [q["text"] for q in grounded["questions"]] == [None, None]
    assert [q["sha256"] for q in grounded["questions"]] == [
        q["sha256"] for q in before["evaluations"][0]["metrics"][0]["questions"]
    ]
    for doc in (before, after):  # everything but the texts and the content flag is unchanged
        doc["snapshot"].pop("content_kept")
        for metric in doc["evaluations"][0]["metrics"]:
            for question in metric["questions"]:
                question.pop("text")
    assert after == before
    printed = _run(any_store_url, snapshot_id)
    assert printed.exit_code == 0, printed.output
    assert "(text expired by a purge)" in printed.stdout
    assert "CONTENT_NOT_KEPT" in printed.stdout


def test_an_unknown_snapshot_exits_2_naming_it(any_store_url: str, snapshot_id: str) -> None:
    """An id (or prefix) no snapshot has: exit 2, one line naming the id and the code."""
    unknown = "0" * 64 if not snapshot_id.startswith("0") else "1" * 64
    for wanted in (unknown, unknown[:10]):
        done = _run(any_store_url, wanted)
        assert done.exit_code == 2
        assert done.output.startswith(f"snapshot {wanted}: not in the store at ")
        assert done.output.rstrip().endswith(f"({StoreCode.UNKNOWN_SNAPSHOT})")
        assert "Traceback" not in done.output


def test_a_malformed_id_exits_2_before_the_store_is_read(tmp_path: Path) -> None:
    """Not 8..64 hex digits: exit 2 naming SNAPSHOT_ID, and no store file is created."""
    url = f"sqlite:///{tmp_path / 'none.db'}"
    for bad in ("abc", "not-an-id-at-all", "g" * 64, "a" * 65):
        done = _run(url, bad)
        assert done.exit_code == 2
        assert f"SNAPSHOT_ID: expected a snapshot id, 8 to 64 hex digits ({BAD_SNAPSHOT_ID})" in (
            done.output
        )
    assert not (tmp_path / "none.db").exists()


def test_an_ambiguous_prefix_exits_2(any_store_url: str) -> None:
    """A prefix two snapshot ids share: exit 2 asking for more digits."""
    one, two = twin_snapshots()
    with open_store(any_store_url) as store:
        store.put_snapshot(one)
        store.put_snapshot(two)
    done = _run(any_store_url, one.snapshot_id[:8])
    assert done.exit_code == 2
    assert f"({AMBIGUOUS_SNAPSHOT_ID})" in done.output
    alone = _run(any_store_url, one.snapshot_id, "--json")
    assert alone.exit_code == 0, alone.output
    assert json.loads(alone.stdout)["evaluations"] == []  # recorded, not evaluated yet


def test_a_missing_sqlite_store_is_refused(tmp_path: Path) -> None:
    """A store that does not exist is NO_STORE (exit 2), never created empty."""
    done = _run(f"sqlite:///{tmp_path / 'absent.db'}", "ab" * 32)
    assert done.exit_code == 2
    assert "NO_STORE" in done.output
    assert not (tmp_path / "absent.db").exists()
