"""The synthetic judge server itself: auth, logging, knobs, and the standalone process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from tests.judges.judge_kit import MIXED, NOUL
from worker.judges import JudgeRequest, SystemOneJudge
from worker.judges._strict import strict_loads
from worker.judges._synthetic import synthetic_response
from worker.judges.testing import Fault, JudgeServer, _KnownQuestions, edit, serve_in_thread, stall


@pytest.mark.asyncio
async def test_key_required_when_configured(keyed_server: JudgeServer) -> None:
    """Started with a key: missing or wrong Bearer → 401; every request is counted and logged."""
    async with httpx.AsyncClient() as client:
        url = keyed_server.base_url + "/v1/systemone"
        missing = await client.post(url, json=NOUL.wire())
        wrong = await client.post(url, json=NOUL.wire(), headers={"Authorization": "Bearer no"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert keyed_server.count == 2
    assert [r.headers.get("authorization") for r in keyed_server.requests] == [None, "Bearer no"]


@pytest.mark.asyncio
async def test_invalid_system_one_request_is_422(server: JudgeServer) -> None:
    """A body that is not a valid System One request gets a FastAPI-style 422."""
    async with httpx.AsyncClient() as client:
        reply = await client.post(server.base_url + "/v1/systemone", json={"state": "s"})
    assert reply.status_code == 422
    assert reply.json()["detail"][0]["msg"]


@pytest.mark.asyncio
async def test_unknown_path_is_404(server: JudgeServer) -> None:
    """Only …/v1/systemone and …/chat/completions are served."""
    async with httpx.AsyncClient() as client:
        reply = await client.post(server.base_url + "/v2/other", json={})
    assert reply.status_code == 404


@pytest.mark.asyncio
async def test_latency_knob() -> None:
    """latency_ms delays every answer by at least that long."""
    with serve_in_thread(latency_ms=200) as server:
        async with SystemOneJudge(server.base_url, api_key="k") as judge:
            started = time.monotonic()
            await judge(NOUL)
    assert time.monotonic() - started >= 0.2


class _SlowServer(JudgeServer):
    """A server whose answering takes 0.4 s of blocking work (a slow judge's own processing)."""

    def _route(self, path: str, body: str, fault: Fault) -> web.Response:
        time.sleep(0.4)
        return super()._route(path, body, fault)


def test_latency_counts_from_arrival() -> None:
    """The server's own work on a request runs within latency_ms, not after it (0.5 s, not 0.9)."""
    server = _SlowServer(latency_ms=500, record=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        base_url = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        with httpx.Client(timeout=10) as client:
            started = time.monotonic()
            reply = client.post(base_url + "/v1/systemone", json=NOUL.wire())
            elapsed_s = time.monotonic() - started
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
    assert reply.status_code == 200
    assert 0.5 <= elapsed_s < 0.85


@pytest.mark.asyncio
async def test_normal_reply_is_the_json_written_one(server: JudgeServer) -> None:
    """A normal reply (written by orjson) parses to what the json-written reply path sends."""
    server.script(Fault(rewrite=lambda text: text), Fault(rewrite=lambda text: text))
    url = server.base_url + "/v1/systemone"
    async with httpx.AsyncClient() as client:
        by_json = [(await client.post(url, json=r.wire())).json() for r in (NOUL, MIXED)]
        normal = [(await client.post(url, json=r.wire())).json() for r in (NOUL, MIXED)]
    assert normal == by_json
    assert normal[1]["answers"].keys() == MIXED.questions.keys()


def test_stop_releases_stalled_requests() -> None:
    """Stopping the server ends a stalled request promptly (503) instead of hanging shutdown."""
    replies: list[int] = []
    with httpx.Client(timeout=10) as client:
        started = time.monotonic()
        with serve_in_thread() as server:
            server.script(stall())
            url = server.base_url + "/v1/systemone"
            thread = threading.Thread(
                target=lambda: replies.append(client.post(url, json=NOUL.wire()).status_code)
            )
            thread.start()
            deadline = time.monotonic() + 5
            while server.peak_in_flight < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        thread.join(timeout=5)
    assert replies == [503]
    assert time.monotonic() - started < 5


def test_standalone_process_serves_and_stops() -> None:
    """`python -m worker.judges.testing` prints its URL, answers with the key, exits on SIGTERM."""
    env = {**os.environ, "JUDGE_TEST_KEY": "sk-standalone"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker.judges.testing",
            "--port",
            "0",
            "--latency-ms",
            "10",
            "--api-key-env",
            "JUDGE_TEST_KEY",
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:")
        base_url = line.split()[-1]
        with httpx.Client(timeout=10) as client:
            good = client.post(
                base_url + "/v1/systemone",
                json=NOUL.wire(),
                headers={"Authorization": "Bearer sk-standalone"},
            )
            bad = client.post(base_url + "/v1/systemone", json=NOUL.wire())
        assert (good.status_code, bad.status_code) == (200, 401)
        assert good.json()["answers"]["m.q"] == {"type": "noul", "noul": 0.95}
    finally:
        process.terminate()
        code = process.wait(timeout=10)
    assert code == 0


def _body(request: JudgeRequest, model: str = SystemOneJudge.DEFAULT_MODEL) -> str:
    """The body SystemOneJudge sends for ``request`` (it posts nothing here: no request made)."""
    judge = SystemOneJudge("http://127.0.0.1:9", api_key="k", model=model)
    return judge._body(request).decode("utf-8")


def _full_reply(body: str) -> dict[str, Any]:
    """The reply validating ``body`` from scratch gives."""
    return synthetic_response(JudgeRequest.model_validate(strict_loads(body)), 0.95).wire()


def _learned(body: str) -> _KnownQuestions:
    """A table that has answered ``body`` by the full path."""
    known = _KnownQuestions()
    reply, shape = known.reply(body)
    assert reply is None
    assert shape is not None
    known.learn(shape, body, JudgeRequest.model_validate(strict_loads(body)), _full_reply(body))
    return known


def test_a_known_question_set_is_answered_as_validating_the_request_would() -> None:
    """Same questions, other state: the full path's reply byte for byte, usage from its length."""
    # The other state is non-ASCII and longer, so its usage differs from the learned request's.
    known = _learned(_body(MIXED))
    other = MIXED.model_copy(update={"state": {"request": "Où est ma commande ? 🚚" * 40}})
    reply, _ = known.reply(_body(other))
    assert reply is not None
    assert orjson.dumps(reply) == orjson.dumps(_full_reply(_body(other)))
    assert reply["usage"] != _full_reply(_body(MIXED))["usage"]


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(json.loads(_body(MIXED))),  # spaces after separators
        _body(MIXED).replace('{"state":{', '{"state":{"request":"x",', 1),  # a duplicate key
        _body(MIXED.model_copy(update={"state": {}})).replace('"state":{}', '"state":null'),
        _body(MIXED).replace('"model"', '"extra":1,"model"'),
        _body(MIXED, model="another-model"),
    ],
    ids=["not-compact", "duplicate-key", "null-state", "extra-key", "other-model"],
)
def test_a_request_unlike_a_known_one_takes_the_full_path(body: str) -> None:
    """Other bytes, key list, state or model than a known request: not answered from the table."""
    # The full path validates it instead: 422 or its own reply.
    assert _learned(_body(MIXED)).reply(body)[0] is None


@pytest.mark.asyncio
async def test_an_edited_reply_does_not_change_later_normal_replies(server: JudgeServer) -> None:
    """An in-place reply edit leaves later replies as they were; a duplicate key still gets 422."""

    def mutate(reply: dict[str, Any]) -> dict[str, Any]:
        reply["answers"]["m.q"]["noul"] = 0.0
        return reply

    url = server.base_url + "/v1/systemone"
    async with httpx.AsyncClient() as client:
        first = (await client.post(url, content=_body(NOUL))).json()
        server.script(edit(mutate))
        edited = (await client.post(url, content=_body(NOUL))).json()
        again = (await client.post(url, content=_body(NOUL))).json()
        duplicate = _body(NOUL).replace('{"state":{', '{"state":{"answer":"x",', 1)
        refused = await client.post(url, content=duplicate)
    assert edited["answers"]["m.q"]["noul"] == 0.0
    assert again == first == _full_reply(_body(NOUL))
    assert refused.status_code == 422
