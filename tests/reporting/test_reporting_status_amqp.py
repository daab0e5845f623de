"""`evalq status` against RabbitMQ: queue depth from a passive declare, workers via inspect."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from kombu import Connection

from producer import LANE_QUEUES, Lane, Producer
from tests.queue.queue_kit import example_snapshots
from tests.reporting.reporting_kit import evalq
from worker.store import open_store

pytestmark = pytest.mark.services


def _ctl(*args: str) -> bool:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        return False
    done = subprocess.run([ctl, *args], capture_output=True, timeout=60, check=False)
    return done.returncode == 0


def _purge(amqp_url: str) -> None:
    with Connection(amqp_url, connect_timeout=5) as conn:
        for queue in LANE_QUEUES.values():
            channel: Any = conn.channel()  # a kombu transport channel (untyped)
            try:
                channel.queue_purge(queue)
            except conn.channel_errors:
                pass  # never declared: nothing to purge
            finally:
                channel.close()


@pytest.fixture
def private_amqp(amqp_url: str) -> Iterator[str]:
    """A vhost of this test's own (rabbitmqctl), so no other suite's worker touches its queues.

    Where rabbitmqctl cannot be used, the default vhost with evalq's lane queues purged.
    """
    vhost = f"evalq-status-{uuid.uuid4().hex[:8]}"
    if _ctl("add_vhost", vhost) and _ctl("set_permissions", "-p", vhost, "guest", *[".*"] * 3):
        parts = urlsplit(amqp_url)
        try:
            yield urlunsplit((parts.scheme, parts.netloc, f"/{vhost}", "", ""))
        finally:
            _ctl("delete_vhost", vhost)
        return
    _purge(amqp_url)
    try:
        yield amqp_url
    finally:
        _purge(amqp_url)


def test_status_reads_rabbitmq_queue_depth(private_amqp: str, tmp_path: Path) -> None:
    """Three snapshots published to the live lane show as depth 3; unacked and age are unknown."""
    with Producer(private_amqp) as producer:
        producer.enqueue_many(list(example_snapshots().values())[:3], lane=Lane.LIVE)
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    open_store(store_url).close()  # status reads an existing store, never creates one
    done = evalq("status", "--json", broker_url=private_amqp, store_url=store_url)
    assert done.returncode == 0, done.stderr
    broker = json.loads(done.stdout)["broker"]
    assert broker["error"] is None
    assert "guest:***@" in broker["url"]
    depths = {lane["lane"]: lane["depth"] for lane in broker["queues"]["lanes"]}
    assert depths["live"] == 3
    live = next(lane for lane in broker["queues"]["lanes"] if lane["lane"] == "live")
    assert (live["unacked"], live["oldest_age_s"]) == (None, None)
    assert broker["workers"] is not None  # inspect answered (over the broker), whoever is online
