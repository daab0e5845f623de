"""SyntheticJudge: deterministic answers with no network, usage included (issue 2 "Judges")."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.judges.judge_kit import MIXED
from tests.properties.strategies import examples, json_values, nasty_text
from worker.canonical_json import json_size
from worker.judges import (
    ChoiceAnswer,
    ChoiceQuestion,
    JudgeRequest,
    NoulAnswer,
    NoulQuestion,
    ScoreAnswer,
    ScoreQuestion,
    SyntheticJudge,
    validate_response,
)
from worker.judges._synthetic import wire_units


def _nouls(*qids: str) -> JudgeRequest:
    return JudgeRequest(state="s", questions={q: NoulQuestion(instructions="?") for q in qids})


@pytest.mark.asyncio
async def test_noul_answers_p_yes() -> None:
    """An ordinary noul question is answered with p_yes."""
    response = await SyntheticJudge(p_yes=0.8)(_nouls("grounded.c0", "stayed_in_scope.q"))
    assert response.answers["grounded.c0"] == NoulAnswer(noul=0.8)
    assert response.answers["stayed_in_scope.q"] == NoulAnswer(noul=0.8)


@pytest.mark.asyncio
async def test_noul_inverted_for_injection_and_noncommittal() -> None:
    """indirect_injection.* and *.noncommittal get 1 - p_yes; look-alikes do not."""
    request = _nouls(
        "indirect_injection.q",
        "answer_relevancy.noncommittal",
        "x.noncommittal_2",
        "noncommittal.q",
    )
    answers = (await SyntheticJudge(p_yes=0.8)(request)).answers
    assert isinstance(answers["indirect_injection.q"], NoulAnswer)
    assert answers["indirect_injection.q"].noul == pytest.approx(0.2)
    assert isinstance(answers["answer_relevancy.noncommittal"], NoulAnswer)
    assert answers["answer_relevancy.noncommittal"].noul == pytest.approx(0.2)
    assert answers["x.noncommittal_2"] == NoulAnswer(noul=0.8)
    assert answers["noncommittal.q"] == NoulAnswer(noul=0.8)


@pytest.mark.asyncio
async def test_choice_is_first_option_with_certainty() -> None:
    """choice → the first option (criteria order, not sorted) with p=1, others 0, confidence 1."""
    request = JudgeRequest(
        state="s",
        questions={"t.q": ChoiceQuestion(instructions="?", criteria={"zeta": None, "alpha": None})},
    )
    answer = (await SyntheticJudge()(request)).answers["t.q"]
    assert answer == ChoiceAnswer(
        choice="zeta", probabilities={"zeta": 1.0, "alpha": 0.0}, confidence=1.0
    )


@pytest.mark.asyncio
async def test_score_is_top_level_with_string_legend() -> None:
    """score → level n-1 with p=1; the legend holds each level's string form."""
    request = JudgeRequest(
        state="s",
        questions={"c.q": ScoreQuestion(instructions="?", criteria=["low", {"k": [1, 2]}, "top"])},
    )
    answer = (await SyntheticJudge()(request)).answers["c.q"]
    assert answer == ScoreAnswer(
        score=2.0,
        legend={"0": "low", "1": '{"k":[1,2]}', "2": "top"},
        probabilities={"0": 0.0, "1": 0.0, "2": 1.0},
        confidence=1.0,
    )


@pytest.mark.asyncio
async def test_response_is_valid_deterministic_and_says_synthetic() -> None:
    """Responses pass strict validation, carry usage, repeat exactly, say 'synthetic'."""
    judge = SyntheticJudge()
    first, second = await judge(MIXED), await judge(MIXED)
    assert validate_response(MIXED, first) is first
    assert first == second
    assert first.model == "synthetic"
    assert first.usage is not None
    assert first.usage.input_tokens > 0
    assert first.usage.output_tokens == len(MIXED.questions)


@pytest.mark.asyncio
async def test_usage_grows_with_the_request() -> None:
    """input_tokens is derived from the request size (a bigger state costs more tokens)."""
    small = JudgeRequest(state="s", questions={"m.q": NoulQuestion(instructions="?")})
    big = JudgeRequest(state="s" * 4000, questions={"m.q": NoulQuestion(instructions="?")})
    judge = SyntheticJudge()
    small_usage, big_usage = (await judge(small)).usage, (await judge(big)).usage
    assert small_usage is not None
    assert big_usage is not None
    assert big_usage.input_tokens >= small_usage.input_tokens + 900


@pytest.mark.asyncio
async def test_delay_is_cancellable() -> None:
    """delay_s is an asyncio.sleep: a timeout cancels it at once instead of waiting it out."""
    judge = SyntheticJudge(delay_s=30.0)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await judge(MIXED)
    assert time.monotonic() - started < 1.0


@pytest.mark.asyncio
async def test_delay_is_applied() -> None:
    """A positive delay_s delays the answer by at least that long."""
    started = time.monotonic()
    await SyntheticJudge(delay_s=0.1)(MIXED)
    assert time.monotonic() - started >= 0.1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"p_yes": 1.5},
        {"p_yes": -0.1},
        {"p_yes": math.nan},
        {"p_yes": True},
        {"delay_s": -1.0},
        {"delay_s": math.inf},
    ],
)
def test_invalid_arguments_rejected(kwargs: dict[str, float]) -> None:
    """p_yes outside [0,1] (or not a number) and negative/infinite delays are ValueErrors."""
    with pytest.raises(ValueError, match=r"p_yes|delay_s"):
        SyntheticJudge(**kwargs)


@settings(max_examples=examples(300), deadline=None)
@given(state=json_values, model=st.none() | nasty_text)
def test_wire_units_equal_the_size_of_the_dumped_wire(state: Any, model: str | None) -> None:
    """The token count's request size, written from the request's texts, equals json_size(wire)."""
    try:
        request = JudgeRequest(state=state, questions=MIXED.questions, model=model)
        expected = json_size(request.wire())
    except ValueError:  # not a valid request, or not JSON text (a lone surrogate)
        assume(False)
        return
    assert wire_units(request) == expected
