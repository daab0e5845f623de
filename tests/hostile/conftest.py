"""Fixtures of the hostile-input suite, and the table of cases printed at the end of the session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.hostile_kit import ROWS, format_table
from worker.store import Store, open_store


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the hostile-input table: every case and what the system did with it."""
    if not ROWS:
        return
    terminalreporter.section("hostile input: what each case did")
    for line in format_table(ROWS):
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process code sees only the EVALQ_* variables a test sets."""
    for name in list(os.environ):
        if name.startswith(("EVALQ_", "TYPESAFE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def store_url(workdir: Path) -> str:
    """A SQLite store in the test's directory, shared by the CLI and the test."""
    return f"sqlite:///{workdir / 'evalq.db'}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The test's view of that store (opened first, so the schema exists)."""
    with open_store(store_url) as opened:
        yield opened


@pytest.fixture
def env(redis_url: str, store_url: str) -> dict[str, str]:
    """CLI settings: the session's private Redis (flushed per test) and this test's store."""
    return {"broker_url": redis_url, "store_url": store_url}
