"""Fixtures of the OTel event tests: a real OTLP/HTTP receiver and a silent one, on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.otel.otlp_receiver import BlackHole, OtlpReceiver
from tests.queue.conftest import judge_server, start_worker  # noqa: F401 - fixtures reused


@pytest.fixture(autouse=True)
def _clean_env(clean_env: None) -> None:
    """Every test here sees only the EVALQ_* variables it sets (``clean_env``)."""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP logs receiver on 127.0.0.1 that decodes every request."""
    with OtlpReceiver() as started:
        yield started


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    """A port on 127.0.0.1 that accepts connections into its backlog and never answers."""
    with BlackHole() as hole:
        yield hole
