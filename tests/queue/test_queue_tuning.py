"""Performance tuning of the worker and producer paths changes speed, never results.

Pins: the worker's JSON decoder returns exactly what kombu's does; the producer's pre-encoded
message bodies decode to exactly the payloads ``wire()`` describes; the pool-size, GIL switch
interval and CPU priority knobs do what they say.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu.serialization import loads as kombu_loads
from kombu.utils import json as kombu_json

from producer import Lane, Producer
from producer._producer import _encode_body, _Encoded
from tests.queue.queue_kit import REPO, example_snapshots, variants
from worker.app import _json_loads


@pytest.mark.parametrize(
    "body",
    [
        b'[[{"a": 1, "b": [1, 2, {"c": null}]}], {}, {"callbacks": null}]',
        '{"text": "h\u00e9llo", "n": 1.5}',
        kombu_json.dumps(
            {"when": dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "id": uuid.UUID(int=7)}
        ),
        kombu_json.dumps({"raw": b"\x00\x01", "nested": [{"__type__": "bytes"}]}),
        memoryview(b'{"a": []}'),
        bytearray(b"[1, 2]"),
    ],
)
def test_worker_json_decoder_matches_kombu(body: Any) -> None:
    """Fast path or not, the decoded value equals kombu's own decoding of the same body."""
    assert _json_loads(body) == kombu_json.loads(body)


def test_worker_json_decoder_refuses_bad_json() -> None:
    """A malformed body still raises (the consumer dead-letters it as UNDECODABLE)."""
    with pytest.raises(ValueError, match="Expecting"):
        _json_loads(b'{"unfinished": ')


def test_encoded_bodies_decode_to_the_wire_payloads() -> None:
    """Snapshots spliced in as pydantic JSON decode to exactly ``[s.wire() ...]``."""
    batch = variants(example_snapshots()["order-42"], 3, "enc")
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    payload = _Encoded("[" + ",".join(s.model_dump_json() for s in batch) + "]")
    body = _encode_body(((payload,), {}, embed))
    decoded = kombu_loads(body, "application/json", "utf-8", accept={"application/json"})
    assert decoded == [[[s.wire() for s in batch]], {}, embed]
    plain = {"not": "a task body"}
    assert json.loads(_encode_body(plain)) == plain  # anything else: kombu's JSON, unchanged


def test_send_many_and_enqueue_many_publish_the_same_payloads(redis_url: str) -> None:
    """The bulk path (no ids) and enqueue_many put identical snapshot lists on the queue."""
    batch = variants(example_snapshots()["care-no-tools"], 5, "bulk")
    with Producer(redis_url) as producer:
        assert producer.send_many(batch, lane=Lane.BACKFILL, batch_size=2) == 5
        ids = producer.enqueue_many(batch, lane=Lane.BACKFILL, batch_size=2)
    assert ids == [s.snapshot_id for s in batch]
    client = redis.Redis.from_url(redis_url)
    raw = [json.loads(m) for m in reversed(client.lrange("evalq.backfill", 0, -1))]
    client.close()
    bodies = [
        kombu_loads(
            base64.b64decode(m["body"]),
            m["content-type"],
            m["content-encoding"],
            accept={"application/json"},
        )
        for m in raw
    ]
    payloads = [b[0][0] for b in bodies]
    expected = [[s.wire() for s in batch[i : i + 2]] for i in range(0, 5, 2)]
    assert payloads == expected + expected
    assert {m["content-type"] for m in raw} == {"application/json"}


def test_runtime_sets_the_switch_interval_and_priority_of_its_process(tmp_path: Path) -> None:
    """A Runtime applies the measured switch interval and EVALQ_NICE (in its own process)."""
    script = (
        "import os, sys\n"
        "from worker.runtime import Runtime\n"
        "from worker.settings import load_settings\n"
        "rt = Runtime(load_settings(store_url=sys.argv[1], nice=7))\n"
        "tids = os.listdir('/proc/self/task')\n"
        "print(sys.getswitchinterval(), sorted({os.getpriority(os.PRIO_PROCESS, int(t))"
        " for t in tids}))\n"
        "rt.close()\n"
    )
    store_url = f"sqlite:///{tmp_path / 'tuning.db'}"
    done = subprocess.run(
        [sys.executable, "-c", script, store_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPO,
    )
    assert done.stdout.split() == ["0.00025", "[7]"]
