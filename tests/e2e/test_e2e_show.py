"""Auditable records end to end: a real worker, Redis and a stand-in System One judge that logs
every request it receives; then `evalq show` (a subprocess, as a user runs it) must print the
exact question texts the judge received and the sha256 of the state text it received, before and
after `evalq purge`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from producer import Lane, OutcomeEvent, Producer
from tests.cli.cli_kit import evalq
from tests.queue.queue_kit import WorkerProcess, example_snapshots, systemone_knobs, wait_until
from worker.broker import broker_transport_options
from worker.judges.testing import JudgeServer, edit, serve_in_thread
from worker.settings import load_settings
from worker.store import open_store

pytestmark = pytest.mark.services

TRACE = "store-hours-grounded"  # claims and tool results: every agent metric asks the judge
ANSWERED_BY = "jev-2026-01-15"  # what the stand-in says answered (the worker asks jev-latest)


def _answered_by(reply: dict[str, Any]) -> dict[str, Any]:
    return {**reply, "model": ANSWERED_BY}


@pytest.fixture
def judge() -> Iterator[JudgeServer]:
    """The stand-in System One judge, recording requests, answering as ``ANSWERED_BY``."""
    with serve_in_thread() as server:
        server.script(*[edit(_answered_by)] * 4)
        yield server


def _received(server: JudgeServer) -> tuple[str, str]:
    """(the raw body, the exact state text inside it) of the one request the judge got."""
    (request,) = [r for r in server.requests if r.path.endswith("/v1/systemone")]
    body = request.body
    head = '{"state":'
    assert body.startswith(head)
    _, end = json.JSONDecoder().raw_decode(body, len(head))
    return body, body[len(head) : end]


def _show(store_url: str, snapshot_id: str, *more: str) -> Any:
    done = evalq("show", snapshot_id, *more, store_url=store_url)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_show_prints_what_the_judge_received(
    redis_url: str,
    store_url: str,
    judge: JudgeServer,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """Question texts byte-identical to the request, state digest = sha256 of the state sent."""
    snapshot = example_snapshots()[TRACE]
    start_worker(**systemone_knobs(judge.base_url, store_url, redis_url, processes="1"))
    options = broker_transport_options(load_settings(broker_url=redis_url), redis_url)
    with (
        closing(Producer(redis_url, transport_options=options)) as producer,
        open_store(store_url) as store,
    ):
        producer.enqueue(snapshot, lane=Lane.LIVE)
        wait_until(lambda: store.count_evaluations() == 1, 60, "the evaluation")
        producer.outcome(
            OutcomeEvent(
                event_id="o-show-1",
                trace_id=TRACE,
                name="complaint",
                value={"channel": "email"},
                observed_at=datetime.now(UTC),
            )
        )
        wait_until(lambda: any(True for _ in store.iter_linked_outcomes()), 30, "the link")

    body, state_text = _received(judge)
    state_sha256 = hashlib.sha256(state_text.encode("utf-8")).hexdigest()
    doc = json.loads(_show(store_url, snapshot.snapshot_id, "--json").stdout)
    (evaluation,) = doc["evaluations"]
    judged = [m for m in evaluation["metrics"] if m["audited"]]
    assert len(judged) == 7  # the seven agent metrics asked; tool_execution is deterministic
    questions = [q for m in judged for q in m["questions"]]
    assert len(questions) >= 8
    for metric in judged:
        assert metric["state_sha256"] == state_sha256
        assert (metric["judge_model"], metric["judge_model_reported"]) == (ANSWERED_BY, True)
        for question in metric["questions"]:
            # the very bytes of the request: "<namespaced id>":<question text>
            assert f"{json.dumps(question['id'])}:{question['text']}" in body
            assert question["sha256"] == hashlib.sha256(question["text"].encode()).hexdigest()
    assert [o["name"] for o in evaluation["outcomes"]] == ["complaint"]

    printed = _show(store_url, snapshot.snapshot_id[:16]).stdout
    for question in questions:
        assert f"      {question['text']}\n" in printed
    assert f"state sha256 {state_sha256}" in printed
    assert f"judge model {ANSWERED_BY} (reported by the judge)" in printed

    purged = evalq("purge", "--content-before", datetime.now(UTC).isoformat(), store_url=store_url)
    assert purged.returncode == 0, purged.stdout + purged.stderr
    after = json.loads(_show(store_url, snapshot.snapshot_id, "--json").stdout)
    assert after["snapshot"]["content_kept"] is False
    kept = [m for m in after["evaluations"][0]["metrics"] if m["audited"]]
    assert [m["state_sha256"] for m in kept] == [state_sha256] * 7
    assert [q["sha256"] for m in kept for q in m["questions"]] == [q["sha256"] for q in questions]
    assert {q["text"] for m in kept for q in m["questions"]} == {None}
    assert "(text expired by a purge)" in _show(store_url, snapshot.snapshot_id).stdout


def test_show_of_an_unknown_id_exits_2(store_url: str, workdir: Path) -> None:
    """An id that is not there: exit 2 with one line naming it (the store is real, not mocked)."""
    with open_store(store_url):
        pass
    done = evalq("show", "ab" * 32, store_url=store_url, cwd=workdir)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("(UNKNOWN_SNAPSHOT)")
    assert "Traceback" not in done.stderr
