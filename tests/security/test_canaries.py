"""Canaries in an API key, a user request and a tool result: after a full run, failing judges
included, they appear in no log line, no metric label, no record outside the snapshot store
and no report.

The evaluated content may live in exactly three places, each documented as a content store to be
protected and expired: ``snapshot_contents`` (what was evaluated), ``dead_letters.payload`` (the
raw message of a refused item, kept for ``evalq redrive``) and ``question_texts.text`` (the exact
questions asked: a metric may quote the trace in one, as ``grounded`` quotes each claim). The
judge naturally sees the content (that is its job) and the key (in its ``Authorization`` header).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from producer import Lane, Producer, Snapshot
from tests.faults.conftest import StartWorker
from tests.queue.queue_kit import example_snapshots, wait_until, worker_env
from tests.security.security_kit import cli_output
from worker.judges.testing import JudgeServer, invalid_json, serve_in_thread, status
from worker.store import open_store

pytestmark = pytest.mark.services

CONTENT_TABLES = {"snapshot_contents": None, "dead_letters": "payload", "question_texts": "text"}
"""Where evaluated content may legitimately be: a whole table, or one column of it."""


@dataclass(frozen=True)
class Canaries:
    """Three unguessable strings planted in the places a leak would start from."""

    key: str
    user: str
    tool: str

    @property
    def all(self) -> tuple[str, str, str]:
        """Every canary."""
        return (self.key, self.user, self.tool)

    def found_in(self, text: str) -> list[str]:
        """The canaries that occur in ``text``."""
        return [c for c in self.all if c in text]


@pytest.fixture
def canaries() -> Canaries:
    """Fresh canaries for one test."""
    tag = uuid.uuid4().hex
    return Canaries(f"sk-canary-{tag}", f"CANARY-USER-{tag}", f"CANARY-TOOL-{tag}")


@pytest.fixture
def keyed_judge(canaries: Canaries) -> Iterator[JudgeServer]:
    """A judge server that requires the canary key."""
    with serve_in_thread(api_key=canaries.key) as server:
        yield server


@pytest.fixture
def other_judge() -> Iterator[JudgeServer]:
    """A judge server that requires another key: every request with the canary key is a 401."""
    with serve_in_thread(api_key=f"sk-other-{uuid.uuid4().hex}") as server:
        yield server


def _planted(canaries: Canaries, trace_id: str) -> Snapshot:
    """order-42 with the user canary in the request and the tool canary in the tool result."""
    wire = example_snapshots()["order-42"].wire()
    events = []
    notes = {"user": f" (ref {canaries.user})", "tool_result": f" [note {canaries.tool}]"}
    for event in wire["events"]:
        note = notes.get(event["type"])
        events.append({**event, "text": event["text"] + note} if note else event)
    return Snapshot.model_validate({**wire, "trace_id": trace_id, "events": events})


def _hostile_body(canaries: Canaries) -> str:
    """An error body that echoes everything back, as some gateways do."""
    echo = f"bad request from Bearer {canaries.key}: {canaries.user} / {canaries.tool}"
    return json.dumps({"error": {"message": echo}, "detail": [{"msg": echo, "input": echo}]})


def _knobs(broker_url: str, store_url: str, judge: JudgeServer, key: str) -> dict[str, str]:
    return {
        "broker_url": broker_url,
        "store_url": store_url,
        "judge": "systemone",
        "judge_url": judge.base_url,
        "judge_api_key": key,
        "thresholds": "0.2,0.8",
        "budget_s": "3",
        "concurrency": "1",
    }


def _scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def _cells(store_path: Path) -> Iterator[tuple[str, str, str]]:
    """(table, column, text) of every stored value outside the content stores."""
    with closing(sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            if table in CONTENT_TABLES and CONTENT_TABLES[table] is None:
                continue
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            for row in conn.execute(f"SELECT * FROM {table}"):
                for column, value in zip(columns, row, strict=True):
                    if CONTENT_TABLES.get(table) == column:
                        continue
                    text = (
                        value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                    )
                    yield table, column, text


def _at_least(count: Callable[[], int], n: int) -> Callable[[], bool]:
    return lambda: count() >= n


def _run_keyed(
    canaries: Canaries, judge: JudgeServer, producer: Producer, count: Callable[[], int]
) -> None:
    """Five snapshots, one at a time, each meeting its own judge behaviour."""
    scripts = [
        (),  # answered
        (status(500, body=_hostile_body(canaries)),) * 3,  # retried, spent: BACKEND_ERROR
        (status(422, body=_hostile_body(canaries)),),  # not retried: BACKEND_ERROR
        (invalid_json(),),  # INVALID_RESPONSE
        (status(429, retry_after=0.2), status(503, body=_hostile_body(canaries))),  # then fine
    ]
    for index, faults in enumerate(scripts):
        judge.script(*faults)
        producer.enqueue(_planted(canaries, f"canary-keyed-{index}"), lane=Lane.LIVE)
        wait_until(_at_least(count, index + 1), 30, f"evaluation {index}")


def test_canaries_never_leave_the_content_stores(
    canaries: Canaries,
    keyed_judge: JudgeServer,
    other_judge: JudgeServer,
    redis_url: str,
    workdir: Path,
    start_worker: StartWorker,
    producer_for: Callable[..., Producer],
) -> None:
    """Key, request and tool-result canaries: absent from logs, metrics, records and reports."""
    store_path = workdir / "canary.db"
    store_url = f"sqlite:///{store_path}"
    second_broker = redis_url.rsplit("/", 1)[0] + "/1"  # the 401 worker gets a queue of its own
    keyed = start_worker(**_knobs(redis_url, store_url, keyed_judge, canaries.key))
    refused = start_worker(**_knobs(second_broker, store_url, other_judge, canaries.key))
    store = open_store(store_url)
    try:
        _run_keyed(canaries, keyed_judge, producer_for(redis_url), store.count_evaluations)
        producer_for(second_broker).enqueue(_planted(canaries, "canary-401"), lane=Lane.LIVE)
        violating = _planted(canaries, "canary-window").wire()
        violating["window"] = {
            **violating["window"],
            "cutoff_event_id": violating["events"][0]["id"],
        }
        producer_for(redis_url).send_raw("evalq.evaluate", violating, lane=Lane.LIVE)
        wait_until(lambda: store.count_evaluations() == 6, 30, "the 401 evaluation")
        wait_until(lambda: len(store.open_dead_letters()) == 1, 30, "the dead letter")
        reasons = {r.reason for r in store.iter_results()}
    finally:
        store.close()
    assert {"BACKEND_ERROR", "INVALID_RESPONSE"} <= reasons, "the failing judges must have run"
    assert other_judge.count >= 1
    assert keyed_judge.count >= 9

    leaks: list[str] = []
    for worker in (keyed, refused):
        leaks += [f"metrics: {c}" for c in canaries.found_in(_scrape(worker.metrics_port))]
        leaks += [f"log {worker.log_path.name}: {c}" for c in canaries.found_in(worker.log)]
    for table, column, text in _cells(store_path):
        leaks += [f"store {table}.{column}: {c}" for c in canaries.found_in(text)]
        assert "Traceback" not in text, f"exception text in {table}.{column}"
    env = worker_env(store_url=store_url, broker_url=redis_url)
    html = workdir / "report.html"
    outputs = {
        "report --json": cli_output(["report", "--json"], env, workdir),
        "report": cli_output(["report"], env, workdir),
        "report --html": cli_output(["report", "--html", str(html)], env, workdir)
        + html.read_text(),
        "status --json": cli_output(["status", "--json"], env, workdir),
    }
    for name, text in outputs.items():
        leaks += [f"evalq {name}: {c}" for c in canaries.found_in(text)]
    assert leaks == []
    with closing(sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)) as conn:
        (contents,) = conn.execute("SELECT group_concat(content) FROM snapshot_contents").fetchone()
    assert canaries.user in contents
    assert canaries.tool in contents
    assert canaries.key not in contents
