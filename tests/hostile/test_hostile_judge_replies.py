"""Hostile judge replies: huge bodies and gzip bombs are read bounded, in memory and in time.

A real HTTP server on 127.0.0.1 sends ten times (or more) the client's limit; the client runs in
its own interpreter and reports its peak RSS growth, which must stay under limit x concurrency
plus a fixed margin (interpreter noise, buffers), far below what the server sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.evaluation.engine_kit import Probe, make_trace
from tests.hostile._hostile_judge_kit import gzip_bomb, hostile_server, run_client
from worker.evaluation import Evaluator, Limits, Reason
from worker.judges import InvalidReply, JudgeError, RetryPolicy, SystemOneJudge
from worker.judges._endpoint import JsonEndpoint

MIB = 1024 * 1024
LIMIT = 1 * MIB
MARGIN_KIB = 24 * 1024
BUDGET_S = 0.5
MARGIN_S = 0.05


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """One hostile server for the module."""
    with hostile_server() as url:
        yield url


def _growth_kib(result: dict[str, Any]) -> int:
    return int(result["peak_kib"]) - int(result["baseline_kib"])


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("mode", ["big-ok", "chunked-ok"])
def test_huge_success_bodies_stay_within_the_limit(
    base_url: str, transport: str, mode: str
) -> None:
    """Eight 10 MiB 200 replies: INVALID_RESPONSE each, peak RSS growth < 8 x limit + margin."""
    result = run_client(
        base_url, f"{mode}/{10 * LIMIT}", concurrency=8, limit=LIMIT, transport=transport
    )
    assert result["outcomes"] == ["INVALID_RESPONSE"] * 8
    assert _growth_kib(result) < 8 * LIMIT // 1024 + MARGIN_KIB


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("mode", ["big-error", "chunked-error"])
def test_huge_error_bodies_stay_within_the_error_cap(
    base_url: str, transport: str, mode: str
) -> None:
    """Eight 10 MiB 500 replies: a JudgeError with the status each, RSS growth bounded."""
    result = run_client(
        base_url, f"{mode}/{10 * LIMIT}", concurrency=8, limit=LIMIT, transport=transport
    )
    assert result["outcomes"] == ["JudgeError:500"] * 8
    assert _growth_kib(result) < 8 * LIMIT // 1024 + MARGIN_KIB


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_gzip_bombs_are_inflated_only_up_to_the_limit(base_url: str, transport: str) -> None:
    """Four ~64 KB gzip bodies inflating to 64 MiB each: INVALID_RESPONSE, RSS growth bounded."""
    result = run_client(
        base_url, f"bomb-ok/{64 * MIB}", concurrency=4, limit=LIMIT, transport=transport
    )
    assert result["outcomes"] == ["INVALID_RESPONSE"] * 4
    assert _growth_kib(result) < 4 * LIMIT // 1024 + MARGIN_KIB
    assert float(result["elapsed_s"]) < 1.0


def test_gzip_bomb_error_body_keeps_only_the_status(base_url: str) -> None:
    """A 500 whose gzip body inflates to 64 MiB is a retryable JudgeError(500), RSS bounded."""
    result = run_client(
        base_url, f"bomb-error/{64 * MIB}", concurrency=4, limit=LIMIT, transport="aiohttp"
    )
    assert result["outcomes"] == ["JudgeError:500"] * 4
    assert _growth_kib(result) < 4 * LIMIT // 1024 + MARGIN_KIB


@pytest.mark.asyncio
async def test_reply_within_the_limit_is_returned_whole(base_url: str) -> None:
    """A gzip body that inflates to exactly the limit is returned decoded, not refused."""
    endpoint = JsonEndpoint(
        f"{base_url}/bomb-ok/{LIMIT}",
        service="probe",
        headers={},
        client=None,
        policy=RetryPolicy(attempts=1),
        max_reply_bytes=LIMIT,
    )
    try:
        body = await endpoint.post(b"{}")
    finally:
        await endpoint.aclose()
    assert body == bytes(LIMIT)


@pytest.mark.asyncio
async def test_oversized_reply_is_not_retried(base_url: str) -> None:
    """An oversized 200 is INVALID_RESPONSE at once: one attempt, no retry inside the budget."""
    endpoint = JsonEndpoint(
        f"{base_url}/big-ok/{2 * LIMIT}",
        service="probe",
        headers={},
        client=None,
        policy=RetryPolicy(attempts=3, backoff_initial_s=0.5),
        max_reply_bytes=LIMIT,
    )
    started = time.monotonic()
    try:
        with pytest.raises(InvalidReply) as caught:
            await endpoint.post(b"{}")
    finally:
        await endpoint.aclose()
    assert caught.value.code == "INVALID_RESPONSE"
    assert time.monotonic() - started < 0.5  # a retry would have waited >= 0.5 s


@pytest.mark.asyncio
async def test_oversized_error_body_is_still_a_retryable_status(base_url: str) -> None:
    """A 500 with a 10 MiB body is a JudgeError carrying status 500, retryable, no body text."""
    endpoint = JsonEndpoint(
        f"{base_url}/big-error/{10 * LIMIT}",
        service="probe",
        headers={},
        client=None,
        policy=RetryPolicy(attempts=1),
        max_reply_bytes=LIMIT,
    )
    try:
        with pytest.raises(JudgeError) as caught:
            await endpoint.post(b"{}")
    finally:
        await endpoint.aclose()
    assert (caught.value.status, caught.value.retryable) == (500, True)
    assert str(caught.value) == "probe request failed with HTTP 500"


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["bomb-ok", "slow-bomb"])
async def test_engine_budget_holds_against_gzip_bombs(base_url: str, mode: str) -> None:
    """Four evaluations against a 256 MiB gzip-bomb judge: INVALID_RESPONSE within budget+50 ms."""
    gzip_bomb(256 * MIB)  # compressed before the clock starts (the server reuses it)
    judge = SystemOneJudge(
        base_url=f"{base_url}/{mode}/{256 * MIB}", api_key="k", max_reply_bytes=LIMIT
    )

    async def one() -> tuple[float, list[str]]:
        evaluator = Evaluator(judge, [Probe("m")], Limits(budget_s=BUDGET_S))
        started = time.monotonic()
        report = await evaluator.evaluate(make_trace())
        return time.monotonic() - started, [e.result.reason for e in report.results]

    try:
        outcomes = await asyncio.gather(*(one() for _ in range(4)))
    finally:
        await judge.aclose()
    for elapsed_s, reasons in outcomes:
        assert elapsed_s <= BUDGET_S + MARGIN_S
        assert reasons == [Reason.INVALID_RESPONSE]


@pytest.mark.asyncio
async def test_engine_budget_holds_while_a_body_trickles_in(base_url: str) -> None:
    """A reply that trickles in (never reaching the limit in time) is TIMEOUT at budget+50 ms."""
    judge = SystemOneJudge(
        base_url=f"{base_url}/trickle/{LIMIT}", api_key="k", max_reply_bytes=LIMIT
    )
    try:
        evaluator = Evaluator(judge, [Probe("m")], Limits(budget_s=BUDGET_S))
        started = time.monotonic()
        report = await evaluator.evaluate(make_trace())
        elapsed_s = time.monotonic() - started
    finally:
        await judge.aclose()
    assert [e.result.reason for e in report.results] == [Reason.TIMEOUT]
    assert elapsed_s <= BUDGET_S + MARGIN_S
