"""Fixtures for the producer end-to-end tests, reused from the queue and producer tests.

Every worker a test starts runs as a subprocess in its own process group and is killed when the
test ends; the private Redis of a test is stopped with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.producer.conftest import private_redis  # noqa: F401 - fixture reused as it is
from tests.queue.conftest import start_worker  # noqa: F401 - fixture reused as it is
from worker.store import Store, open_store


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process code (producers, settings) sees only the EVALQ_* variables a test sets."""
    for name in list(os.environ):
        if name.startswith(("EVALQ_", "TYPESAFE_")):
            monkeypatch.delenv(name)


@pytest.fixture
def store_url(workdir: Path) -> str:
    """A SQLite store in the test's directory, shared by the workers, the CLI and the test."""
    return f"sqlite:///{workdir / 'evalq.db'}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The test's view of that store (opened first, so the schema exists before any worker)."""
    with open_store(store_url) as opened:
        yield opened
