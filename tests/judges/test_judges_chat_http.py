"""ChatJudge.openai_compatible against the real synthetic Chat Completions server on 127.0.0.1."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.judges.judge_kit import CANARY_KEY, MIXED, NOUL, leaks
from worker.judges import ChatJudge, InvalidReply, JudgeError, RetryPolicy, Usage
from worker.judges.testing import (
    Fault,
    JudgeServer,
    duplicate_key,
    edit_content,
    finish_reason,
    missing_usage,
    raw,
    status,
    synthetic_response,
)

ONCE = RetryPolicy(attempts=1)


@pytest.mark.asyncio
async def test_end_to_end_answers_match_synthetic(server: JudgeServer) -> None:
    """Through HTTP, the decoded answers equal what the server's synthetic judge computed."""
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "qwen") as judge:
        response = await judge(MIXED)
    expected = synthetic_response(MIXED, 0.95)
    assert response.model == "llm:synthetic"
    assert response.usage == expected.usage
    assert response.answers["grounded.c0"] == expected.answers["grounded.c0"]
    assert response.answers["tool_choice.q"].choice == "wrong"  # type: ignore[union-attr]
    assert response.answers["completeness.q"].score == 2.0  # type: ignore[union-attr]


@pytest.mark.asyncio
@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/v1/chat/completions"])
async def test_posts_to_chat_completions(server: JudgeServer, suffix: str) -> None:
    """Requests go to {base_url}/chat/completions (a full endpoint URL is used as is)."""
    async with ChatJudge.openai_compatible(server.base_url + suffix, "qwen") as judge:
        await judge(NOUL)
    (logged,) = server.requests
    assert logged.path == "/v1/chat/completions"
    assert logged.json()["model"] == "qwen"


@pytest.mark.asyncio
async def test_bearer_only_with_key(server: JudgeServer) -> None:
    """Authorization: Bearer is sent only when an api_key is given; JSON headers always."""
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "m") as judge:
        await judge(NOUL)
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "m", api_key="sk-1") as judge:
        await judge(NOUL)
    without, with_key = (r.headers for r in server.requests)
    assert "authorization" not in without
    assert with_key["authorization"] == "Bearer sk-1"
    assert with_key["content-type"] == without["content-type"] == "application/json"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "fault",
    [
        finish_reason("length"),
        edit_content(lambda c: {**c, "extra.q": 0.5}),
        Fault(content='{"m.q": 0.5, "m.q": 0.5}'),
        Fault(content='{"m.q": "0.95"}'),
        edit_content(lambda c: {"m.q": float("nan")}),
    ],
    ids=["length", "extra-key", "duplicate-content", "string-number", "nan-content"],
)
async def test_invalid_content_keeps_usage(server: JudgeServer, fault: Fault) -> None:
    """Content-level faults → InvalidReply that still reports the server's usage."""
    server.script(fault)
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "qwen") as judge:
        with pytest.raises(InvalidReply) as caught:
            await judge(NOUL)
    assert caught.value.code == "INVALID_TEXT_MODEL_RESPONSE"
    assert caught.value.model == "llm:synthetic"
    assert isinstance(caught.value.usage, Usage)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "fault",
    [missing_usage(), duplicate_key(), raw("{}"), raw(b"\xff\xfe{}")],
    ids=["missing-usage", "duplicate-top", "empty-object", "not-utf8"],
)
async def test_invalid_envelope(server: JudgeServer, fault: Fault) -> None:
    """Envelope faults (no usage, duplicate keys, no choices, bad bytes) → InvalidReply."""
    server.script(fault)
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "qwen") as judge:
        with pytest.raises(InvalidReply) as caught:
            await judge(NOUL)
    assert caught.value.usage is None


@pytest.mark.asyncio
async def test_http_error_message_sanitized(server: JudgeServer) -> None:
    """Non-2xx → JudgeError with the body's message, the key redacted, status kept."""
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {CANARY_KEY}"}})
    server.script(status(401, body=body))
    judge = ChatJudge.openai_compatible(server.base_url + "/v1", "m", api_key=CANARY_KEY)
    with pytest.raises(JudgeError) as caught:
        await judge(NOUL)
    await judge.aclose()
    assert str(caught.value) == "chat request failed with HTTP 401: Incorrect API key provided: ***"
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert not leaks(CANARY_KEY, caught.value, judge)


@pytest.mark.asyncio
async def test_injected_client_stays_open(server: JudgeServer) -> None:
    """With an injected client, aclose() leaves it open for its owner."""
    async with httpx.AsyncClient() as client:
        judge = ChatJudge.openai_compatible(server.base_url + "/v1", "m", client=client)
        await judge(NOUL)
        await judge.aclose()
        assert not client.is_closed


@pytest.mark.asyncio
async def test_owned_client_closed(server: JudgeServer) -> None:
    """The judge's own client is closed by `async with`: no request goes out afterwards."""
    async with ChatJudge.openai_compatible(server.base_url + "/v1", "m", policy=ONCE) as judge:
        await judge(NOUL)
    with pytest.raises(JudgeError) as caught:
        await judge(NOUL)
    assert str(caught.value) == "chat client is closed"
    assert server.count == 1


@pytest.mark.parametrize("base", ["localhost:8000/v1", "ftp://h/v1", "http://h/v1?x=1"])
def test_invalid_base_url(base: str) -> None:
    """The chat base URL must be an absolute http(s) URL."""
    with pytest.raises(ValueError, match="base_url"):
        ChatJudge.openai_compatible(base, "m")


@pytest.mark.parametrize("key", ["", "with space", "ключ"])
def test_invalid_api_key(key: str) -> None:
    """A given api_key must be non-empty printable ASCII."""
    with pytest.raises(ValueError, match="api_key must be"):
        ChatJudge.openai_compatible("http://127.0.0.1:1/v1", "m", api_key=key)
