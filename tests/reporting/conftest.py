"""One store filled by a real run, shared by the acceptance tests of this folder (module scope).

The Redis is the session's private server (``tests/conftest.py``), flushed before the fill; the
worker subprocess keeps running until the module's tests are done, so ``evalq status`` sees it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.reporting.reporting_kit import Filled, fill
from worker.embedded import RedisServer


@pytest.fixture(scope="module")
def filled(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    """A SQLite store filled through Redis and a real worker (see ``reporting_kit.fill``)."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    with fill(redis_server.url, tmp_path_factory.mktemp("reporting")) as done:
        yield done
