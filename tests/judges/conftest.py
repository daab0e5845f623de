"""Fixtures for the judge tests: the synthetic judge server on 127.0.0.1, one per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.judges.judge_kit import CANARY_KEY
from worker.judges.testing import JudgeServer, serve_in_thread


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    """A synthetic System One / Chat Completions server without a key, fresh for each test."""
    with serve_in_thread() as running:
        yield running


@pytest.fixture
def keyed_server() -> Iterator[JudgeServer]:
    """A server that answers only ``Authorization: Bearer <CANARY_KEY>``."""
    with serve_in_thread(api_key=CANARY_KEY) as running:
        yield running
