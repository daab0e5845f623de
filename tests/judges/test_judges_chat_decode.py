"""ChatJudge reply decoding, rule by rule (docs/semantics.md §7.5, the strict AgentScope emulation).

The transport is the judge's injected seam (``async (request_json) -> response_json``), so these
tests hand it exact replies; the HTTP transport is tested against the real server elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.judges.judge_kit import MIXED, NOUL, Recorder, chat_reply, leaks
from worker.judges import (
    ChatJudge,
    ChoiceQuestion,
    InvalidReply,
    JudgeError,
    JudgeRequest,
    NoulAnswer,
    NoulQuestion,
    ScoreQuestion,
    Usage,
)

CODE = "INVALID_TEXT_MODEL_RESPONSE"
GOOD = {
    "grounded.c0": 0.9,
    "answer_relevancy.noncommittal": 0.1,
    "tool_choice.q": {"correct": 0.8, "wrong": 0.2},
    "completeness.q": {"0": 0.1, "1": 0.2, "2": 0.7},
}
CHOICE3 = JudgeRequest(
    state="s",
    questions={"t.q": ChoiceQuestion(instructions="?", criteria={"c": None, "b": None, "a": None})},
)
SCORE3 = JudgeRequest(
    state="s",
    questions={"s.q": ScoreQuestion(instructions="?", criteria=["low", {"mid": [1]}, "high"])},
)


async def _ask(reply: object, request: JudgeRequest = MIXED, model: str = "qwen") -> Any:
    return await ChatJudge(model, Recorder(reply))(request)


async def _invalid(reply: object, request: JudgeRequest = MIXED) -> InvalidReply:
    with pytest.raises(InvalidReply) as caught:
        await _ask(reply, request)
    assert caught.value.code == CODE
    assert str(caught.value) == CODE
    return caught.value


# --- outgoing body --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_outgoing_body_shape() -> None:
    """OpenAI chat body: model, temperature 0, max_tokens, json_object, system + user messages."""
    recorder = Recorder(chat_reply(GOOD))
    await ChatJudge("qwen-2.5", recorder)(MIXED)
    body = recorder.sent()
    assert set(body) == {"model", "temperature", "max_tokens", "response_format", "messages"}
    assert (body["model"], body["temperature"]) == ("qwen-2.5", 0)
    assert body["max_tokens"] == 256 + 64 * 4
    assert body["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


@pytest.mark.asyncio
async def test_user_content_is_the_request_with_null_model() -> None:
    """The user message is the JSON of {state, model: null, questions} (request model ignored)."""
    recorder = Recorder(chat_reply({"m.q": 0.5}))
    await ChatJudge("qwen", recorder)(NOUL.model_copy(update={"model": "jev-latest"}))
    user = json.loads(recorder.sent()["messages"][1]["content"])
    assert user == {
        "state": {"answer": "Paris"},
        "model": None,
        "questions": NOUL.wire()["questions"],
    }
    assert list(user) == ["state", "model", "questions"]


@pytest.mark.asyncio
async def test_system_instructions_fixed_and_treat_state_as_untrusted() -> None:
    """The system prompt is the same for every request and says state is untrusted data."""
    first, second = Recorder(chat_reply(GOOD)), Recorder(chat_reply({"m.q": 0.5}))
    await ChatJudge("m", first)(MIXED)
    await ChatJudge("m", second)(NOUL)
    system = first.sent()["messages"][0]["content"]
    assert system == second.sent()["messages"][0]["content"]
    assert "untrusted" in system
    assert "JSON" in system


@pytest.mark.asyncio
async def test_max_tokens_capped_at_16384() -> None:
    """max_tokens = min(16384, 256 + 64·n): 260 questions hit the cap."""
    questions = {f"m.q{i}": NoulQuestion(instructions="?") for i in range(260)}
    request = JudgeRequest(state="s", questions=questions)
    recorder = Recorder(chat_reply(dict.fromkeys(questions, 0.5)))
    await ChatJudge("m", recorder)(request)
    assert recorder.sent()["max_tokens"] == 16384


# --- a good reply ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_good_reply_decoded() -> None:
    """A valid reply becomes typed answers with argmax, expectation, legend and confidences."""
    response = await _ask(chat_reply(GOOD, usage=(120, 30)))
    assert response.usage == Usage(input_tokens=120, output_tokens=30)
    assert response.answers["grounded.c0"] == NoulAnswer(noul=0.9)
    choice = response.answers["tool_choice.q"]
    assert (choice.choice, dict(choice.probabilities)) == (
        "correct",
        {"correct": 0.8, "wrong": 0.2},
    )
    assert choice.confidence == pytest.approx((0.8 - 0.5) / 0.5)
    score = response.answers["completeness.q"]
    assert score.score == pytest.approx(0 * 0.1 + 1 * 0.2 + 2 * 0.7)
    assert dict(score.legend) == {"0": "none", "1": '{"level":"partial"}', "2": "all"}
    assert score.confidence == pytest.approx((0.7 - 1 / 3) / (1 - 1 / 3))


# --- rules 1-3: strict JSON, model, usage ------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "text",
    [
        chat_reply(GOOD)[:-1] + ', "model": "again"}',
        chat_reply(GOOD).replace('"prompt_tokens": 11', '"prompt_tokens": 11, "prompt_tokens": 11'),
        chat_reply(GOOD) + " {}",
        chat_reply(GOOD).replace('"prompt_tokens": 11', '"prompt_tokens": NaN'),
        "not json",
        "",
    ],
    ids=["dup-top", "dup-nested", "trailing", "nan", "garbage", "empty"],
)
async def test_rule1_raw_reply_strict_json(text: str) -> None:
    """Rule 1: duplicate keys anywhere, trailing data, NaN → invalid, with nothing readable."""
    error = await _invalid(text)
    assert (error.model, error.usage) == ("llm:qwen", None)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-4.1-mini", "llm:gpt-4.1-mini"), (123, "llm:qwen"), (None, "llm:qwen"), ("", "llm:")],
)
async def test_rule2_returned_model(model: object, expected: str) -> None:
    """Rule 2: 'llm:' + raw.model if it is a string, else 'llm:' + the configured model."""
    response = await _ask(chat_reply(GOOD, model=model))
    assert response.model == expected


@pytest.mark.asyncio
async def test_rule2_model_absent_uses_configured() -> None:
    """Rule 2: no model field at all → 'llm:' + configured model."""
    reply = json.loads(chat_reply(GOOD))
    del reply["model"]
    assert (await _ask(json.dumps(reply))).model == "llm:qwen"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "usage",
    [(1.5, 2), (True, 2), (-1, 2), (2**63, 2), ("3", 2), (None, 2), (3, 2.0)],
    ids=["float", "bool", "negative", "int64-overflow", "string", "null", "float-out"],
)
async def test_rule3_bad_usage_is_unknown_and_reply_invalid(usage: tuple[Any, Any]) -> None:
    """Rule 3 + 9: unusable counts → usage None, so an otherwise perfect reply is invalid."""
    error = await _invalid(chat_reply(GOOD, usage=usage))
    assert (error.model, error.usage) == ("llm:gpt-test", None)


@pytest.mark.asyncio
async def test_rule3_largest_int64_usage_accepted() -> None:
    """Rule 3: counts up to 2**63-1 are fine."""
    response = await _ask(chat_reply(GOOD, usage=(2**63 - 1, 0)))
    assert response.usage == Usage(input_tokens=2**63 - 1, output_tokens=0)


@pytest.mark.asyncio
async def test_rule9_missing_usage_invalid() -> None:
    """Rule 9: a reply without usage is invalid even if its content is fine."""
    assert (await _invalid(chat_reply(GOOD, usage=None))).usage is None


@pytest.mark.asyncio
async def test_usage_survives_content_failures() -> None:
    """Rule 3: usage is read before the content, so it is kept when the content is bad."""
    error = await _invalid(chat_reply({"grounded.c0": "yes"}, usage=(40, 9)))
    assert (error.model, error.usage) == ("llm:gpt-test", Usage(input_tokens=40, output_tokens=9))


# --- rule 4: finish_reason and content -----------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("finish", ["length", "content_filter", None, "STOP", 0])
async def test_rule4_finish_reason_must_be_stop(finish: object) -> None:
    """Rule 4: truncated ('length') or any other finish_reason is invalid; usage is kept."""
    error = await _invalid(chat_reply(GOOD, finish_reason=finish, usage=(5, 6)))
    assert error.usage == Usage(input_tokens=5, output_tokens=6)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(choices=[]),
        lambda r: r.pop("choices"),
        lambda r: r.update(choices={"0": r["choices"][0]}),
        lambda r: r["choices"][0]["message"].update(content=None),
        lambda r: r["choices"][0]["message"].update(content=GOOD),
        lambda r: r["choices"][0].pop("message"),
        lambda r: r["choices"][0].pop("finish_reason"),
    ],
    ids=[
        "no-choices",
        "choices-missing",
        "choices-object",
        "content-null",
        "content-object",
        "no-message",
        "no-finish-reason",
    ],
)
async def test_rule4_shape(change: Any) -> None:
    """Rule 4: choices[0].message.content must exist and be a string."""
    reply = json.loads(chat_reply(GOOD))
    change(reply)
    await _invalid(json.dumps(reply))


# --- rule 5: content object -------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "content",
    [
        "```json\n" + json.dumps(GOOD) + "\n```",
        json.dumps(GOOD) + " trailing",
        json.dumps(GOOD)[:-1] + ', "grounded.c0": 0.9}',
        json.dumps(GOOD).replace('"correct": 0.8', '"correct": 0.8, "correct": 0.8'),
        json.dumps(GOOD).replace("0.9", "NaN"),
        json.dumps([GOOD]),
        json.dumps({**GOOD, "extra.q": 0.5}),
        json.dumps({k: v for k, v in GOOD.items() if k != "grounded.c0"}),
        json.dumps({**{k: v for k, v in GOOD.items() if k != "grounded.c0"}, "other": 0.9}),
    ],
    ids=[
        "fenced",
        "trailing",
        "dup-top",
        "dup-nested",
        "nan",
        "array",
        "extra-key",
        "missing-key",
        "renamed-key",
    ],
)
async def test_rule5_content_strict_object_exact_keys(content: str) -> None:
    """Rule 5: content is strict JSON, an object with exactly the question ids."""
    await _invalid(chat_reply(content))


# --- rule 6: noul -----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("value", ["0.9", True, False, None, 1.01, -0.01, {"p": 0.9}, [0.9], 1e308])
async def test_rule6_noul_must_be_a_number_in_range(value: object) -> None:
    """Rule 6: strings, booleans, null, objects and values outside [0,1] are invalid (no clamp)."""
    await _invalid(chat_reply({"m.q": value}), NOUL)


@pytest.mark.asyncio
async def test_rule6_huge_integer_is_invalid_not_a_crash() -> None:
    """Rule 6: a 400-digit integer is just an out-of-range number (InvalidReply, no overflow)."""
    await _invalid(chat_reply('{"m.q": ' + "9" * 400 + "}"), NOUL)


@pytest.mark.asyncio
@pytest.mark.parametrize(("value", "expected"), [(0, 0.0), (1, 1.0), (0.25, 0.25)])
async def test_rule6_integers_and_floats_accepted(value: object, expected: float) -> None:
    """Rule 6: JSON integers 0/1 and floats in [0,1] are numbers."""
    response = await _ask(chat_reply({"m.q": value}), NOUL)
    assert response.answers["m.q"] == NoulAnswer(noul=expected)


# --- rule 7: choice ----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "value",
    [
        {"a": 0.5, "b": 0.5},
        {"a": 0.2, "b": 0.3, "c": 0.5, "d": 0.0},
        {"a": 0.2, "b": 0.3, "x": 0.5},
        {"a": 0.2, "b": 0.3, "c": "0.5"},
        {"a": 0.2, "b": 0.3, "c": True},
        {"a": 0.2, "b": 0.3, "c": None},
        {"a": -0.1, "b": 0.6, "c": 0.5},
        "a",
        [0.2, 0.3, 0.5],
    ],
    ids=["missing", "extra", "renamed", "string", "bool", "null", "negative", "label", "array"],
)
async def test_rule7_choice_needs_every_option_as_probability(value: object) -> None:
    """Rule 7: an object with exactly the option keys, each a valid probability."""
    await _invalid(chat_reply({"t.q": value}), CHOICE3)


@pytest.mark.asyncio
async def test_rule7_tie_goes_to_alphabetically_first() -> None:
    """Rule 7: keys are processed sorted; a tie for the max picks the alphabetically first."""
    response = await _ask(chat_reply({"t.q": {"c": 0.4, "b": 0.4, "a": 0.2}}), CHOICE3)
    answer = response.answers["t.q"]
    assert answer.choice == "b"
    assert list(answer.probabilities) == ["a", "b", "c"]


@pytest.mark.asyncio
async def test_rule7_sorting_follows_utf16_like_java() -> None:
    """Rule 7: keys sort by UTF-16 code units (Java), so U+FF5E sorts after an astral emoji."""
    request = JudgeRequest(
        state="s",
        questions={
            "t.q": ChoiceQuestion(instructions="?", criteria={"\uff5e": None, "\U0001f600": None})
        },
    )
    response = await _ask(chat_reply({"t.q": {"\uff5e": 0.5, "\U0001f600": 0.5}}), request)
    assert response.answers["t.q"].choice == "\U0001f600"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("probabilities", "confidence"),
    [
        ({"a": 0.6, "b": 0.3, "c": 0.1}, (0.6 - 1 / 3) / (1 - 1 / 3)),
        ({"a": 1.0, "b": 0.0, "c": 0.0}, 1.0),
        ({"a": 0.34, "b": 0.33, "c": 0.33}, (0.34 - 1 / 3) / (1 - 1 / 3)),
    ],
)
async def test_rule7_confidence_formula(probabilities: dict[str, float], confidence: float) -> None:
    """Rule 7: confidence = max(0, (p_max - 1/K) / (1 - 1/K))."""
    response = await _ask(chat_reply({"t.q": probabilities}), CHOICE3)
    assert response.answers["t.q"].confidence == pytest.approx(confidence)


@pytest.mark.asyncio
async def test_rule7_no_renormalization() -> None:
    """Rule 7/9: a distribution summing to 0.8 is not rescaled; it is invalid."""
    await _invalid(chat_reply({"t.q": {"a": 0.4, "b": 0.2, "c": 0.2}}), CHOICE3)


@pytest.mark.asyncio
async def test_rule7_probabilities_kept_as_given() -> None:
    """Rule 7: values within the sum tolerance are returned unchanged (not normalized)."""
    response = await _ask(chat_reply({"t.q": {"a": 0.50005, "b": 0.25, "c": 0.25}}), CHOICE3)
    assert response.answers["t.q"].probabilities["a"] == 0.50005


# --- rule 8: score -----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "value",
    [
        {"0": 0.5, "1": 0.5},
        {"0": 0.5, "1": 0.5, "2": 0.0, "3": 0.0},
        {"0": 0.5, "1": 0.5, "02": 0.0},
        {"1": 0.5, "2": 0.5, "3": 0.0},
        [0.2, 0.3, 0.5],
        1.0,
        {"0": 0.5, "1": 0.5, "2": "0"},
    ],
    ids=["missing", "extra", "zero-padded", "one-based", "array", "bare-number", "string"],
)
async def test_rule8_score_keys_exactly_levels(value: object) -> None:
    """Rule 8: an object with exactly the keys "0".."n-1", each a valid probability."""
    await _invalid(chat_reply({"s.q": value}), SCORE3)


@pytest.mark.asyncio
async def test_rule8_score_expectation_and_legend() -> None:
    """Rule 8: score = Σ i·p_i, legend[i] = string form of criteria[i], same confidence rule."""
    response = await _ask(chat_reply({"s.q": {"2": 0.5, "0": 0.25, "1": 0.25}}), SCORE3)
    answer = response.answers["s.q"]
    assert answer.score == pytest.approx(1.25)
    assert dict(answer.legend) == {"0": "low", "1": '{"mid":[1]}', "2": "high"}
    assert answer.confidence == pytest.approx((0.5 - 1 / 3) / (1 - 1 / 3))


# --- rule 9: final validation (docs/semantics.md §7.2) --------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ({"a": 0.50014, "b": 0.25, "c": 0.25}, True),
        ({"a": 0.50016, "b": 0.25, "c": 0.25}, False),
        ({"a": 0.49986, "b": 0.25, "c": 0.25}, True),
        ({"a": 0.49984, "b": 0.25, "c": 0.25}, False),
    ],
)
async def test_rule9_sum_tolerance(value: dict[str, float], valid: bool) -> None:
    """Rule 9: |Σp - 1| ≤ 5e-5·K (K=3 → 1.5e-4) passes; beyond it is invalid."""
    reply = chat_reply({"t.q": value})
    if valid:
        assert (await _ask(reply, CHOICE3)).answers["t.q"].choice == "a"
    else:
        await _invalid(reply, CHOICE3)


@pytest.mark.asyncio
async def test_rule9_score_above_top_level_invalid() -> None:
    """Rule 9: a within-tolerance sum that pushes Σ i·p_i above n-1 fails the score range."""
    await _invalid(chat_reply({"s.q": {"0": 0.0, "1": 0.00014, "2": 1.0}}), SCORE3)


# --- rule 10 and transport failures ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_rule10_errors_never_carry_content() -> None:
    """Rule 10: the error text is the code only; model output never appears in it."""
    error = await _invalid(chat_reply({"grounded.c0": "LEAKED-MODEL-OUTPUT"}))
    assert not leaks("LEAKED-MODEL-OUTPUT", error)
    assert error.__cause__ is None
    assert error.__suppress_context__


@pytest.mark.asyncio
async def test_transport_judge_error_propagates() -> None:
    """A JudgeError raised by the transport reaches the caller unchanged."""
    original = JudgeError("chat request failed with HTTP 503", status=503, retryable=True)

    async def failing(_: str) -> str:
        raise original

    with pytest.raises(JudgeError) as caught:
        await ChatJudge("m", failing)(NOUL)
    assert caught.value is original


@pytest.mark.asyncio
async def test_transport_other_exception_becomes_judge_error() -> None:
    """Any other transport exception becomes a JudgeError naming only its type."""

    async def failing(_: str) -> str:
        raise RuntimeError("secret detail from the transport")

    with pytest.raises(JudgeError) as caught:
        await ChatJudge("m", failing)(NOUL)
    assert "RuntimeError" in str(caught.value)
    assert not leaks("secret detail", caught.value)


@pytest.mark.asyncio
async def test_transport_returning_non_string_is_invalid() -> None:
    """A transport that returns something other than str is an invalid reply."""
    error = await _invalid({"choices": []}, NOUL)
    assert (error.model, error.usage) == ("llm:qwen", None)


@pytest.mark.parametrize("model", ["", "   ", None, 5])
def test_blank_model_rejected(model: Any) -> None:
    """ChatJudge needs a non-blank model name."""
    with pytest.raises(ValueError, match="model must be a non-blank string"):
        ChatJudge(model, Recorder(""))


def test_transport_must_be_callable() -> None:
    """A non-callable transport is rejected at construction."""
    with pytest.raises(ValueError, match="transport must be an async callable"):
        ChatJudge("m", "http://not-a-transport")  # type: ignore[arg-type]
