"""``evalq`` run inside a checkout: the files its SQLite store creates are ignored by git."""

from __future__ import annotations

from datetime import UTC, datetime
from fnmatch import fnmatch
from pathlib import Path

from worker.store import OutcomeRecord, open_store

REPO = Path(__file__).resolve().parents[2]
_AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def _ignored(name: str) -> bool:
    patterns = [
        line.strip()
        for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#") and "/" not in line.strip().rstrip("/")
    ]
    return any(fnmatch(name, pattern) for pattern in patterns)


def test_every_file_beside_a_sqlite_store_is_in_gitignore(tmp_path: Path) -> None:
    """evalq.db and its sidecars (WAL, writer/urgent turn locks) all match .gitignore."""
    outcome = OutcomeRecord(
        event_id="e1", trace_id="t1", name="refund_reversed", value=1, observed_at=_AT
    )
    with open_store(f"sqlite:///{tmp_path / 'evalq.db'}") as store:
        store.record_outcome(outcome)  # a write: the writer's turn files
        created = sorted(p.name for p in tmp_path.iterdir())
    assert {"evalq.db", "evalq.db-writer", "evalq.db-urgent"} <= set(created), created
    assert [name for name in created if not _ignored(name)] == []
