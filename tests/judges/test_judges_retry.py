"""Retries of the HTTP judges: stamina, Retry-After, and never past the evaluator's budget.

Waits are real but short (Retry-After of a few tenths of a second); budget tests set a real
deadline with ``use_deadline`` and only assert upper bounds with wide margins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
import stamina
from stamina.instrumentation import RetryDetails, set_on_retry_hooks

from tests.judges.judge_kit import NOUL
from worker.judges import ChatJudge, JudgeError, RetryPolicy, SystemOneJudge, use_deadline
from worker.judges._retry import parse_retry_after
from worker.judges.testing import JudgeServer, stall, status

FAST = RetryPolicy(backoff_initial_s=0.05, backoff_max_s=0.05, backoff_jitter_s=0.0)


@pytest.fixture(autouse=True)
def real_retries() -> Iterator[list[RetryDetails]]:
    """stamina active, not in test mode (waits are real here); captures scheduled retries."""
    scheduled: list[RetryDetails] = []

    def remember(details: RetryDetails) -> None:
        scheduled.append(details)

    stamina.set_active(True)
    set_on_retry_hooks([remember])
    with stamina.set_testing(False):
        yield scheduled
    set_on_retry_hooks(None)


def _judge(server: JudgeServer, policy: RetryPolicy = FAST) -> SystemOneJudge:
    return SystemOneJudge(server.base_url, api_key="k", policy=policy)


@pytest.mark.asyncio
async def test_429_retry_after_honored_then_success(
    server: JudgeServer, real_retries: list[RetryDetails]
) -> None:
    """429 with Retry-After: 0.3 → stamina waits exactly that long, the retry succeeds."""
    server.script(status(429, retry_after="0.3"))
    async with _judge(server, RetryPolicy()) as judge:  # default backoff (0.5 s) is replaced
        started = time.monotonic()
        response = await judge(NOUL)
        elapsed = time.monotonic() - started
    assert response.model == "synthetic"
    assert server.count == 2
    assert [d.wait_for for d in real_retries] == [0.3]
    assert 0.3 <= elapsed < 2.0


@pytest.mark.asyncio
async def test_a_first_attempt_that_succeeds_never_enters_stamina(
    server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call answered at once builds no stamina retry context (the fast path)."""
    built: list[object] = []
    original = stamina.retry_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(stamina, "retry_context", counting)
    async with _judge(server) as judge:
        response = await judge(NOUL)
    assert response.model == "synthetic"
    assert built == []
    server.script(status(503))
    async with _judge(server) as judge:
        response = await judge(NOUL)
    assert response.model == "synthetic"
    assert len(built) == 1
    assert server.count == 3


@pytest.mark.asyncio
async def test_a_failed_first_attempt_is_stamina_s_first_attempt(
    server: JudgeServer, real_retries: list[RetryDetails]
) -> None:
    """The failure of the first attempt is what stamina's hooks see as retry 1's cause."""
    server.script(status(503), status(503))
    async with _judge(server) as judge:
        response = await judge(NOUL)
    assert response.model == "synthetic"
    assert server.count == 3
    assert [d.retry_num for d in real_retries] == [1, 2]
    assert all(isinstance(d.caused_by, JudgeError) for d in real_retries)
    assert [d.wait_for for d in real_retries] == [0.05, 0.05]


@pytest.mark.asyncio
async def test_retry_after_http_date_in_the_past_retries_at_once(server: JudgeServer) -> None:
    """An HTTP-date Retry-After that has passed means 'retry now' (no backoff added)."""
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    server.script(status(503, retry_after=past))
    async with _judge(server, RetryPolicy(backoff_initial_s=5.0)) as judge:
        started = time.monotonic()
        await judge(NOUL)
    assert time.monotonic() - started < 2.0
    assert server.count == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("code", [408, 429, 500, 502, 503, 504, 529])
async def test_transient_statuses_retried(server: JudgeServer, code: int) -> None:
    """408, 429, 5xx and 529 are retried; the next attempt's success is returned."""
    server.script(status(code))
    async with _judge(server) as judge:
        response = await judge(NOUL)
    assert response.model == "synthetic"
    assert server.count == 2


@pytest.mark.asyncio
@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 413, 422])
async def test_other_4xx_not_retried(server: JudgeServer, code: int) -> None:
    """A 4xx other than 408/429 fails at once: one request, non-retryable JudgeError."""
    server.script(status(code))
    async with _judge(server) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, caught.value.retryable, server.count) == (code, False, 1)


@pytest.mark.asyncio
async def test_attempts_exhausted_raises_last_error(server: JudgeServer) -> None:
    """After `attempts` failures the last JudgeError is raised (3 requests by default)."""
    server.script(status(503), status(502), status(529), status(500))
    async with _judge(server) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, server.count) == (529, 3)


@pytest.mark.asyncio
async def test_timeout_then_success(server: JudgeServer) -> None:
    """A stalled attempt times out and is retried; the next attempt answers."""
    server.script(stall())
    policy = RetryPolicy(attempt_timeout_s=0.2, backoff_initial_s=0.05, backoff_jitter_s=0.0)
    async with _judge(server, policy) as judge:
        response = await asyncio.wait_for(judge(NOUL), timeout=5)
    assert response.model == "synthetic"
    assert server.count == 2


@pytest.mark.asyncio
async def test_retry_after_longer_than_budget_stops(
    server: JudgeServer, real_retries: list[RetryDetails]
) -> None:
    """Retry-After beyond the remaining budget: no wait, no retry, the 429 is raised at once."""
    server.script(status(429, retry_after="2"))
    async with _judge(server) as judge:
        started = time.monotonic()
        with use_deadline(started + 1.0), pytest.raises(JudgeError) as caught:
            await judge(NOUL)
        elapsed = time.monotonic() - started
    assert (caught.value.status, server.count, real_retries) == (429, 1, [])
    assert elapsed < 0.5


@pytest.mark.asyncio
async def test_backoff_longer_than_budget_stops(server: JudgeServer) -> None:
    """Without Retry-After the backoff itself must fit in the remaining budget, else stop."""
    server.script(status(503))
    policy = RetryPolicy(backoff_initial_s=1.0, backoff_jitter_s=0.0)
    async with _judge(server, policy) as judge:
        started = time.monotonic()
        with use_deadline(started + 0.5), pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, server.count) == (503, 1)
    assert time.monotonic() - started < 0.4


@pytest.mark.asyncio
async def test_retry_within_budget_proceeds(server: JudgeServer) -> None:
    """A wait that fits in the remaining budget is taken and the retry succeeds."""
    server.script(status(429, retry_after="0.1"))
    async with _judge(server) as judge:
        with use_deadline(time.monotonic() + 2.0):
            response = await judge(NOUL)
    assert response.model == "synthetic"
    assert server.count == 2


@pytest.mark.asyncio
async def test_attempt_timeout_bounded_by_remaining_budget(server: JudgeServer) -> None:
    """A stalled request gives up when the budget ends, not after the 10 s attempt timeout."""
    server.script(stall(), stall())
    async with _judge(server, RetryPolicy(attempt_timeout_s=10.0)) as judge:
        started = time.monotonic()
        with use_deadline(started + 0.3), pytest.raises(JudgeError) as caught:
            await judge(NOUL)
        elapsed = time.monotonic() - started
    assert caught.value.retryable
    assert caught.value.status is None
    assert 0.25 <= elapsed < 1.5
    assert server.count == 1  # no retry once the budget is gone


@pytest.mark.asyncio
async def test_expired_deadline_sends_nothing(server: JudgeServer) -> None:
    """With the budget already spent no request is started."""
    async with _judge(server) as judge:
        with use_deadline(time.monotonic() - 0.01), pytest.raises(JudgeError):
            await judge(NOUL)
    assert server.count == 0


@pytest.mark.asyncio
async def test_retry_after_above_cap_stops(server: JudgeServer) -> None:
    """Without a deadline, a Retry-After above the policy cap ends retries (no long sleep)."""
    server.script(status(429, retry_after="60"))
    async with _judge(server, RetryPolicy(retry_after_cap_s=1.0)) as judge:
        started = time.monotonic()
        with pytest.raises(JudgeError):
            await judge(NOUL)
    assert time.monotonic() - started < 0.5
    assert server.count == 1


@pytest.mark.asyncio
async def test_cancellation_during_backoff_propagates(server: JudgeServer) -> None:
    """Cancelling the caller while the judge waits to retry cancels at once (no JudgeError)."""
    server.script(status(429, retry_after="20"))
    waiting = asyncio.Event()

    def on_retry(details: RetryDetails) -> None:  # stamina calls it just before its sleep
        waiting.set()

    set_on_retry_hooks([on_retry])
    async with _judge(server) as judge:
        task = asyncio.create_task(judge(NOUL))
        await asyncio.wait_for(waiting.wait(), timeout=5)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert time.monotonic() - started < 1.0
    assert server.count == 1


@pytest.mark.asyncio
async def test_chat_transport_retries_too(server: JudgeServer) -> None:
    """openai_compatible retries 429/529 like System One and gives up on 400 at once."""
    server.script(status(429, retry_after="0"), status(529, retry_after="0"))
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "m", policy=FAST) as judge:
        assert (await judge(NOUL)).model == "llm:synthetic"
        assert server.count == 3
        server.script(status(400))
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, server.count) == (400, 4)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": " 0.25 "}, 0.25),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after-ms": "junk", "retry-after": "9"}, 9.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    """Retry-After as delta-seconds or HTTP-date (relative to now), retry-after-ms first."""
    now_s = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC).timestamp()
    assert parse_retry_after(headers, now_s=now_s) == seconds


def test_policy_validation() -> None:
    """Nonsense retry policies are ValueErrors."""
    bad: list[dict[str, Any]] = [
        {"attempts": 0},
        {"attempt_timeout_s": 0},
        {"backoff_initial_s": float("inf")},
        {"backoff_jitter_s": -1},
    ]
    for kwargs in bad:
        with pytest.raises(ValueError, match="must be"):
            RetryPolicy(**kwargs)
