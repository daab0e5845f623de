"""One store filled by real workers for the whole module, and an ``evalq ui`` over it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.ui.ui_kit import Filled, UiServer, fill, ui_server
from worker.embedded import RedisServer


@pytest.fixture(scope="module")
def filled(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Filled:
    """A SQLite store evaluated through Redis, real workers and the stand-in judge."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return fill(redis_server.url, tmp_path_factory.mktemp("ui-store"))


@pytest.fixture(scope="module")
def open_ui(filled: Filled, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """``evalq ui`` on a free loopback port without a token (open on loopback)."""
    log = tmp_path_factory.mktemp("ui-open") / "ui.log"
    with ui_server(filled.store_url, log) as server:
        yield server
