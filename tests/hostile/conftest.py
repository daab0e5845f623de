"""Fixtures of the hostile-input suite, and the table of cases printed at the end of the session."""

from __future__ import annotations

import pytest

from tests.hostile.hostile_kit import ROWS, format_table


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the hostile-input table: every case and what the system did with it."""
    if not ROWS:
        return
    terminalreporter.section("hostile input: what each case did")
    for line in format_table(ROWS):
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _clean_env(clean_env: None) -> None:
    """Every test here sees only the EVALQ_* variables it sets (``clean_env``)."""


@pytest.fixture
def env(redis_url: str, store_url: str) -> dict[str, str]:
    """CLI settings: the session's private Redis (flushed per test) and this test's store."""
    return {"broker_url": redis_url, "store_url": store_url}
