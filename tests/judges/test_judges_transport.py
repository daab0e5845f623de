"""The judges' default HTTP client and the one place transport errors become JudgeError."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import httpx
import pytest

from tests.judges.judge_kit import NOUL
from worker.judges import JudgeError, RetryPolicy, SystemOneJudge
from worker.judges._endpoint import error_message, sanitize, translated_errors
from worker.judges._transport import DEFAULT_MAX_CONNECTIONS, as_httpx_error, default_client
from worker.judges.testing import JudgeServer, drop, serve_in_thread

IN_FLIGHT = 200  # above httpx's default pool (100 connections) and aiohttp's default limit (100)


@pytest.mark.asyncio
async def test_default_client_keeps_hundreds_in_flight() -> None:
    """200 concurrent judge calls are all at the server at once (no pool cap below that)."""
    assert DEFAULT_MAX_CONNECTIONS >= IN_FLIGHT
    with serve_in_thread(latency_ms=1000) as server:
        async with SystemOneJudge(server.base_url, api_key="k") as judge:
            started = time.monotonic()
            responses = await asyncio.gather(*(judge(NOUL) for _ in range(IN_FLIGHT)))
            elapsed = time.monotonic() - started
    assert len(responses) == IN_FLIGHT
    assert server.peak_in_flight == IN_FLIGHT
    assert elapsed < 5.0  # one latency (1 s) plus overhead, not 2+ rounds of it


def test_judge_survives_a_new_event_loop() -> None:
    """A judge used under one asyncio.run and then another still works (fresh session per loop)."""
    with serve_in_thread() as server:
        judge = SystemOneJudge(server.base_url, api_key="k")
        first = asyncio.run(judge(NOUL))
        second = asyncio.run(judge(NOUL))
        asyncio.run(judge.aclose())
    assert first == second
    assert server.count == 2


@pytest.mark.asyncio
async def test_default_client_is_an_httpx_client() -> None:
    """The default client speaks the httpx API (so an injected one can replace it)."""
    client = default_client()
    try:
        assert isinstance(client, httpx.AsyncClient)
        with serve_in_thread() as server:
            reply = await client.post(server.base_url + "/v1/systemone", json=NOUL.wire())
        assert reply.status_code == 200
        assert reply.json()["model"] == "synthetic"
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_dropped_connection_is_a_retryable_read_error(server: JudgeServer) -> None:
    """A server that hangs up without replying → retryable transport JudgeError (no status)."""
    server.script(drop())
    async with SystemOneJudge(
        server.base_url, api_key="k", policy=RetryPolicy(attempts=1)
    ) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert str(caught.value) == "System One transport error (ReadError)"
    assert (caught.value.status, caught.value.retryable) == (None, True)


@pytest.mark.asyncio
async def test_dropped_connection_then_success(server: JudgeServer) -> None:
    """After a dropped connection the retry uses a fresh connection and succeeds."""
    server.script(drop(), drop())
    policy = RetryPolicy(backoff_initial_s=0.01, backoff_jitter_s=0.0)
    async with SystemOneJudge(server.base_url, api_key="k", policy=policy) as judge:
        assert (await judge(NOUL)).model == "synthetic"
    assert server.count == 3


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (aiohttp.ConnectionTimeoutError(), httpx.ConnectTimeout),
        (aiohttp.SocketTimeoutError(), httpx.ReadTimeout),
        (aiohttp.ServerTimeoutError(), httpx.ReadTimeout),
        (aiohttp.ServerDisconnectedError(), httpx.ReadError),
        (aiohttp.ClientPayloadError(), httpx.ReadError),
        (aiohttp.InvalidURL("x"), httpx.UnsupportedProtocol),
        (ConnectionResetError(), httpx.ReadError),
    ],
)
def test_aiohttp_failures_keep_the_httpx_contract(exc: Exception, expected: type) -> None:
    """The aiohttp transport raises the httpx exception type matching each aiohttp failure."""
    assert type(as_httpx_error(exc)) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (httpx.ConnectError("refused"), True),
        (httpx.ReadError("reset"), True),
        (httpx.RemoteProtocolError("bad"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.PoolTimeout("busy"), True),
        (TimeoutError(), True),
        (aiohttp.ServerDisconnectedError(), True),
        (ConnectionResetError(), True),
        (httpx.UnsupportedProtocol("gopher"), False),
        (httpx.DecodingError("gzip"), False),
        (httpx.TooManyRedirects("loop"), False),
    ],
)
def test_translation_to_judge_error(exc: Exception, retryable: bool) -> None:
    """Transport exceptions become JudgeError(status=None) with the right retryable flag."""
    with pytest.raises(JudgeError) as caught, translated_errors("svc"):
        raise exc
    assert (caught.value.status, caught.value.retryable) == (None, retryable)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_translation_leaves_other_exceptions_alone() -> None:
    """Programming errors are not disguised as backend errors."""
    with pytest.raises(KeyError), translated_errors("svc"):
        raise KeyError("x")


def test_translated_message_names_only_the_type() -> None:
    """The JudgeError text names the exception type, never the foreign message."""
    with pytest.raises(JudgeError) as caught, translated_errors("svc"):
        raise httpx.ConnectError("details with a token sk-SECRET")
    assert str(caught.value) == "svc transport error (ConnectError)"


def test_sanitize_redacts_bearer_tokens_and_secrets() -> None:
    """Known secrets and any 'Bearer <token>' are redacted before a message is kept."""
    text = sanitize("key sk-1 and bearer abc.def and Bearer\txyz", ("sk-1",))
    assert text == "key *** and Bearer *** and Bearer ***"


def test_error_message_ignores_huge_bodies() -> None:
    """A body too large to be an error message is not parsed (status-only message)."""
    body = b'{"message": "' + b"x" * 70_000 + b'"}'
    assert error_message("svc", 500, body, ()) == "svc request failed with HTTP 500"
