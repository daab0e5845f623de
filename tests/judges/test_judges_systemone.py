"""SystemOneJudge against a real server: wire body, headers, strict replies, errors, secrets.

Covers docs/semantics.md §7.3 (auth, headers, model, error messages from the body) and §7.2
(every 2xx body is validated strictly and a failure keeps the readable model and usage).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
from typing import Any

import httpx
import pytest

from tests.judges.judge_kit import CANARY_KEY, MIXED, NOUL, leaks
from worker.canonical_json import canonical_json, compact_json
from worker.judges import (
    InvalidReply,
    JudgeError,
    JudgeRequest,
    RetryPolicy,
    SystemOneJudge,
)
from worker.judges.testing import (
    Fault,
    JudgeServer,
    duplicate_key,
    edit,
    invalid_json,
    missing_usage,
    raw,
    stall,
    status,
    synthetic_response,
)

ONCE = RetryPolicy(attempts=1)


def _judge(server: JudgeServer, **kwargs: Any) -> SystemOneJudge:
    return SystemOneJudge(server.base_url, api_key=kwargs.pop("api_key", "key-1"), **kwargs)


async def _invalid(
    server: JudgeServer, fault: Fault, request: JudgeRequest = MIXED
) -> InvalidReply:
    server.script(fault)
    async with _judge(server) as judge:
        with pytest.raises(InvalidReply) as caught:
            await judge(request)
    return caught.value


def _answers(fn: Any) -> Fault:
    """Edit only the answers object of a normal reply."""
    return edit(lambda reply: {**reply, "answers": fn(dict(reply["answers"]))})


SENT = MIXED.model_copy(update={"model": "jev-latest"})  # what the judge puts on the wire
SYNTHETIC_USAGE = synthetic_response(SENT, 0.95).usage  # the server counts what it received


# --- request side ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_headers_bearer_and_json(server: JudgeServer) -> None:
    """Authorization: Bearer <key>, Accept and Content-Type application/json."""
    async with _judge(server, api_key="key-abc") as judge:
        await judge(NOUL)
    headers = server.requests[0].headers
    assert headers["authorization"] == "Bearer key-abc"
    assert headers["accept"] == "application/json"
    assert headers["content-type"] == "application/json"


@pytest.mark.asyncio
async def test_body_is_the_wire_request_with_default_model(server: JudgeServer) -> None:
    """The body is request.wire() plus the judge's default model (always sent)."""
    async with _judge(server) as judge:
        await judge(MIXED)
    assert server.requests[0].json() == {**MIXED.wire(), "model": "jev-latest"}


@pytest.mark.asyncio
async def test_planned_request_sends_the_same_json(server: JudgeServer) -> None:
    """An engine-planned request (state serialized in advance, keys sorted) sends the same JSON."""
    text = canonical_json(MIXED.state)
    planned = JudgeRequest.planned(MIXED.state, MIXED.questions, text)
    async with _judge(server) as judge:
        await judge(planned)
    assert server.requests[0].json() == {**MIXED.wire(), "model": "jev-latest"}
    assert planned.state_json() == text
    assert planned.model_dump() == MIXED.model_dump()
    assert planned.model_fields_set == {"state", "questions", "model"}
    assert MIXED.state_json() == compact_json(MIXED.state)
    assert MIXED.questions_json() == compact_json(MIXED.questions_wire())


def test_planned_request_needs_questions() -> None:
    """A planned request is refused without questions or with a blank question id."""
    with pytest.raises(ValueError, match="question"):
        JudgeRequest.planned(MIXED.state, {}, "{}")
    with pytest.raises(ValueError, match="question"):
        JudgeRequest.planned(MIXED.state, {" ": next(iter(MIXED.questions.values()))}, "{}")


@pytest.mark.asyncio
async def test_configured_default_model(server: JudgeServer) -> None:
    """A judge built with model=... sends that model for requests without one."""
    async with _judge(server, model="jev-1.13.0") as judge:
        await judge(NOUL)
    assert server.requests[0].json()["model"] == "jev-1.13.0"


@pytest.mark.asyncio
async def test_request_model_overrides_default(server: JudgeServer) -> None:
    """A request-level model wins over the judge's; a blank one falls back to the default."""
    async with _judge(server) as judge:
        await judge(NOUL.model_copy(update={"model": "jev-special"}))
        await judge(NOUL.model_copy(update={"model": "  "}))
    assert [r.json()["model"] for r in server.requests] == ["jev-special", "jev-latest"]


@pytest.mark.asyncio
async def test_injected_client_is_used_and_left_open(server: JudgeServer) -> None:
    """An injected httpx client sends the requests and stays open after the judge closes."""
    async with httpx.AsyncClient(headers={"X-Probe": "injected"}) as client:
        async with _judge(server, client=client) as judge:
            await judge(NOUL)
        assert server.requests[0].headers["x-probe"] == "injected"
        assert not client.is_closed
        reply = await client.post(server.base_url + "/v1/systemone", json=NOUL.wire())
        assert reply.status_code == 200


@pytest.mark.asyncio
async def test_owned_client_closed_by_aclose(server: JudgeServer) -> None:
    """A judge closes the client it built: after aclose() it sends nothing (JudgeError)."""
    judge = _judge(server)
    await judge(NOUL)
    await judge.aclose()
    with pytest.raises(JudgeError) as caught:
        await judge(NOUL)
    assert (str(caught.value), caught.value.retryable) == ("System One client is closed", False)
    assert server.count == 1


# --- good replies ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_valid_reply_is_returned(server: JudgeServer) -> None:
    """A valid 2xx reply becomes the JudgeResponse it describes (model and usage included)."""
    async with _judge(server) as judge:
        response = await judge(MIXED)
    assert response == synthetic_response(SENT, 0.95)
    assert response.usage is not None


@pytest.mark.asyncio
async def test_integer_probabilities_are_numbers(server: JudgeServer) -> None:
    """JSON integers 0 and 1 are valid probabilities (numbers), e.g. a one-hot choice."""
    server.script(
        raw(
            json.dumps(
                {
                    "model": "jev-1",
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                    "answers": {"m.q": {"type": "noul", "noul": 1}},
                }
            )
        )
    )
    async with _judge(server) as judge:
        response = await judge(NOUL)
    assert response.answers["m.q"].noul == 1.0  # type: ignore[union-attr]


# --- invalid 2xx replies (docs/semantics.md §7.2) -------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "fault",
    [
        invalid_json(),
        raw("null"),
        raw(""),
        raw("[]"),
        raw(
            '{"model": "jev-1", "answers": {}, "usage": {"input_tokens": 1, "output_tokens": 1}} x'
        ),
        duplicate_key(),
        _answers(lambda a: {**a, "grounded.c0": {"type": "noul", "noul": math.nan}}),
        _answers(lambda a: {**a, "grounded.c0": {"type": "noul", "noul": math.inf}}),
        raw(b'{"model": "\xff"}'),
    ],
    ids=["not-json", "null", "empty", "array", "trailing", "duplicate", "nan", "inf", "bad-utf8"],
)
async def test_unparseable_body_is_invalid_reply(server: JudgeServer, fault: Fault) -> None:
    """A 2xx body that is not one strict JSON object: InvalidReply with nothing readable."""
    error = await _invalid(server, fault)
    if fault.body is None:  # an edited normal reply: strict JSON failed, nothing is trusted
        assert (error.model, error.usage) == (None, None)
    else:
        assert error.usage is None


@pytest.mark.asyncio
async def test_missing_usage_is_invalid(server: JudgeServer) -> None:
    """A reply without usage is invalid even with perfect answers; the model is kept."""
    error = await _invalid(server, missing_usage())
    assert (error.model, error.usage) == ("synthetic", None)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "usage",
    [
        None,
        {"input_tokens": -1, "output_tokens": 2},
        {"input_tokens": 1.5, "output_tokens": 2},
        {"input_tokens": True, "output_tokens": 2},
        {"input_tokens": 2**63, "output_tokens": 2},
        {"input_tokens": 1},
        {"input_tokens": 1, "output_tokens": 2, "cost": 0},
    ],
    ids=["null", "negative", "float", "bool", "int64-overflow", "missing-count", "extra-key"],
)
async def test_bad_usage_is_invalid(server: JudgeServer, usage: object) -> None:
    """Usage must be an object of exactly two non-negative int64 integer counts."""
    error = await _invalid(server, edit(lambda reply: {**reply, "usage": usage}))
    assert error.model == "synthetic"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "change",
    [
        lambda a: {k: v for k, v in a.items() if k != "grounded.c0"},
        lambda a: {**a, "extra.q": {"type": "noul", "noul": 0.5}},
        lambda a: {
            **a,
            "grounded.c0": {
                "type": "choice",
                "choice": "x",
                "probabilities": {"x": 1.0},
                "confidence": 1.0,
            },
        },
        lambda a: {**a, "grounded.c0": {"type": "noul", "noul": 1.2}},
        lambda a: {**a, "grounded.c0": {"type": "noul", "noul": "0.9"}},
        lambda a: {**a, "grounded.c0": {"type": "noul", "noul": True}},
        lambda a: {**a, "grounded.c0": {"type": "noul", "noul": None}},
        lambda a: {**a, "grounded.c0": {"type": "noul", "noul": 0.9, "extra": 1}},
        lambda a: {**a, "tool_choice.q": {**a["tool_choice.q"], "choice": "maybe"}},
        lambda a: {**a, "tool_choice.q": {**a["tool_choice.q"], "probabilities": {"correct": 1.0}}},
        lambda a: {
            **a,
            "tool_choice.q": {
                **a["tool_choice.q"],
                "probabilities": {"correct": 0.7, "wrong": 0.2},
            },
        },
        lambda a: {
            **a,
            "tool_choice.q": {
                **a["tool_choice.q"],
                "probabilities": {"correct": 1.2, "wrong": -0.2},
            },
        },
        lambda a: {**a, "tool_choice.q": {**a["tool_choice.q"], "confidence": 1.5}},
        lambda a: {**a, "tool_choice.q": {**a["tool_choice.q"], "confidence": None}},
        lambda a: {**a, "completeness.q": {**a["completeness.q"], "score": 2.5}},
        lambda a: {**a, "completeness.q": {**a["completeness.q"], "score": None}},
        lambda a: {
            **a,
            "completeness.q": {
                **a["completeness.q"],
                "probabilities": {"0": 0.5, "1": 0.5, "2": 0.5},
            },
        },
        lambda a: {**a, "completeness.q": {**a["completeness.q"], "legend": {"0": "a"}}},
        lambda a: {
            **a,
            "completeness.q": {
                **a["completeness.q"],
                "probabilities": {"0": 0.5, "1": 0.5, "3": 0.0},
            },
        },
    ],
    ids=[
        "missing-answer",
        "extra-answer",
        "wrong-type",
        "noul-range",
        "noul-string",
        "noul-bool",
        "noul-null",
        "extra-field",
        "choice-label",
        "choice-keys",
        "choice-sum",
        "choice-probability-range",
        "choice-confidence",
        "choice-confidence-null",
        "score-range",
        "score-null",
        "score-sum",
        "score-legend",
        "score-keys",
    ],
)
async def test_answer_violations_keep_model_and_usage(server: JudgeServer, change: Any) -> None:
    """Any answer violation (semantics §7.2) → InvalidReply keeping the reply's model and usage."""
    error = await _invalid(server, _answers(change))
    assert (error.model, error.usage) == ("synthetic", SYNTHETIC_USAGE)


@pytest.mark.asyncio
async def test_null_answers_is_invalid(server: JudgeServer) -> None:
    """answers must be an object: null is invalid (usage kept)."""
    error = await _invalid(server, edit(lambda reply: {**reply, "answers": None}))
    assert (error.model, error.usage) == ("synthetic", SYNTHETIC_USAGE)


@pytest.mark.asyncio
async def test_invalid_reply_is_not_retried(server: JudgeServer) -> None:
    """A 2xx reply that fails validation is final: one request, no retry."""
    await _invalid(server, missing_usage())
    assert server.count == 1


@pytest.mark.asyncio
async def test_blank_model_is_invalid(server: JudgeServer) -> None:
    """A blank model is invalid; the usage is still kept."""
    error = await _invalid(server, edit(lambda reply: {**reply, "model": "  "}))
    assert (error.model, error.usage) == (None, SYNTHETIC_USAGE)


@pytest.mark.asyncio
async def test_unknown_top_level_key_is_invalid(server: JudgeServer) -> None:
    """The reply object has exactly model/answers/usage (plus nothing unknown)."""
    error = await _invalid(server, edit(lambda reply: {**reply, "latency_ms": 3}))
    assert error.usage == SYNTHETIC_USAGE


@pytest.mark.asyncio
async def test_sum_within_tolerance_is_valid(server: JudgeServer) -> None:
    """|Σp - 1| ≤ 5e-5·K passes (API rounding), so a 4-decimal distribution is accepted."""
    server.script(
        _answers(
            lambda a: {
                **a,
                "tool_choice.q": {
                    "type": "choice",
                    "choice": "correct",
                    "confidence": 0.8,
                    "probabilities": {"correct": 0.90009, "wrong": 0.1},
                },
            }
        )
    )
    async with _judge(server) as judge:
        response = await judge(MIXED)
    assert response.answers["tool_choice.q"].probabilities["correct"] == 0.90009  # type: ignore[union-attr]


# --- HTTP errors (docs/semantics.md §7.3) ---------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ('{"message": "quota exceeded"}', "quota exceeded"),
        ('{"error": "bad things"}', "bad things"),
        ('{"detail": "not allowed"}', "not allowed"),
        ('{"error": {"message": "nested message"}}', "nested message"),
        ('{"error": {"detail": "nested detail"}}', "nested detail"),
        (
            '{"detail": [{"loc": ["body"], "msg": "field required", "type": "missing"}]}',
            "field required",
        ),
    ],
)
async def test_error_message_from_body(server: JudgeServer, body: str, detail: str) -> None:
    """The message comes from message/error/detail, top level or nested under error."""
    server.script(status(400, body=body))
    async with _judge(server) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert str(caught.value) == f"System One request failed with HTTP 400: {detail}"
    assert caught.value.status == 400


@pytest.mark.asyncio
@pytest.mark.parametrize("body", ["", "not json", '{"other": 1}', "null", '{"message": 5}'])
async def test_error_message_fallback(server: JudgeServer, body: str) -> None:
    """Without a usable message the error says 'System One request failed with HTTP n'."""
    server.script(status(418, body=body))
    async with _judge(server) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert str(caught.value) == "System One request failed with HTTP 418"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (409, False),
        (422, False),
        (408, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (529, True),
    ],
)
async def test_status_and_retryable_flag(server: JudgeServer, code: int, retryable: bool) -> None:
    """JudgeError keeps the status; 408/429/5xx (529 included) are retryable, other 4xx not."""
    server.script(status(code))
    async with _judge(server, policy=ONCE) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, caught.value.retryable) == (code, retryable)


@pytest.mark.asyncio
async def test_long_error_messages_are_capped_and_flattened(server: JudgeServer) -> None:
    """A huge multi-line message is cut to <= 200 characters on one line."""
    server.script(status(400, body=json.dumps({"message": "line\n\tbreak " + "x" * 5000})))
    async with _judge(server) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    message = str(caught.value)
    assert len(message) <= 200
    assert "\n" not in message
    assert "\t" not in message
    assert message.startswith("System One request failed with HTTP 400: line break xxx")


@pytest.mark.asyncio
async def test_connection_refused_is_retryable_transport_error() -> None:
    """Nothing listening → JudgeError with status None, retryable."""
    with socket.socket() as sock:  # reserve a port, then close it so nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with SystemOneJudge(f"http://127.0.0.1:{port}", api_key="k", policy=ONCE) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, caught.value.retryable) == (None, True)


@pytest.mark.asyncio
async def test_stalled_server_times_out(server: JudgeServer) -> None:
    """A server that never answers → a retryable timeout JudgeError after the attempt timeout."""
    server.script(stall())
    policy = RetryPolicy(attempts=1, attempt_timeout_s=0.2)
    async with _judge(server, policy=policy) as judge:
        with pytest.raises(JudgeError) as caught:
            await asyncio.wait_for(judge(NOUL), timeout=5)
    assert (caught.value.status, caught.value.retryable) == (None, True)
    assert "timed out" in str(caught.value)


# --- secrets --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_key_never_in_errors_or_repr(server: JudgeServer) -> None:
    """A server echoing the key (and bearer header) in its error: the key shows nowhere."""
    echo = json.dumps({"error": {"message": f"bad key {CANARY_KEY}; got Bearer {CANARY_KEY}"}})
    server.script(status(401, body=echo), status(500, body=echo), raw(f'{{"k": "{CANARY_KEY}"'))
    judge = _judge(server, api_key=CANARY_KEY, policy=ONCE)
    errors: list[BaseException] = []
    for _ in range(3):
        with pytest.raises((JudgeError, InvalidReply)) as caught:
            await judge(NOUL)
        errors.append(caught.value)
    await judge.aclose()
    assert "***" in str(errors[0])
    assert not leaks(CANARY_KEY, judge, *errors)
    assert CANARY_KEY not in repr(vars(judge))


@pytest.mark.asyncio
async def test_key_never_in_transport_errors() -> None:
    """Transport failures (refused connection) do not mention the key either."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with SystemOneJudge(f"http://127.0.0.1:{port}", api_key=CANARY_KEY, policy=ONCE) as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert not leaks(CANARY_KEY, caught.value, judge)


@pytest.mark.asyncio
async def test_wrong_key_gets_401_not_retried(keyed_server: JudgeServer) -> None:
    """A wrong key → 401 JudgeError (not retryable, sent once); the right key is answered."""
    async with _judge(keyed_server, api_key="sk-wrong") as judge:
        with pytest.raises(JudgeError) as caught:
            await judge(NOUL)
    assert (caught.value.status, caught.value.retryable, keyed_server.count) == (401, False, 1)
    async with _judge(keyed_server, api_key=CANARY_KEY) as judge:
        assert (await judge(NOUL)).model == "synthetic"


@pytest.mark.parametrize(
    "key", [None, "", "   ", "has space", "tab\tkey", "line\nkey", "clé-ascii-not", 42]
)
def test_invalid_api_key_rejected_without_echo(key: Any) -> None:
    """A missing, blank or non-printable-ASCII key is a ValueError that does not quote it."""
    with pytest.raises(ValueError, match="api_key must be") as caught:
        SystemOneJudge(api_key=key)
    assert not (isinstance(key, str) and key.strip() and key in str(caught.value))


def test_key_is_stripped() -> None:
    """Surrounding whitespace (e.g. from a secret file) is not part of the key."""
    judge = SystemOneJudge(api_key=f"  {CANARY_KEY}\n")
    assert CANARY_KEY not in repr(judge)


@pytest.mark.parametrize("model", ["", "  ", None])
def test_blank_default_model_rejected(model: Any) -> None:
    """The judge's default model must be non-blank."""
    with pytest.raises(ValueError, match="model must be a non-blank string"):
        SystemOneJudge(api_key="k", model=model)
