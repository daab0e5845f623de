"""Strict response validation (docs/semantics.md §7.2, the AgentScope rules).

:func:`validate_response` is applied by the evaluator to *whatever* any judge returns, and by the
HTTP judges to 2xx bodies. A violation raises :class:`InvalidResponse` whose message is a short
rule code, never the offending content.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ._wire import (
    ChoiceAnswer,
    ChoiceQuestion,
    JudgeRequest,
    JudgeResponse,
    NoulAnswer,
    NoulQuestion,
    ScoreAnswer,
    ScoreQuestion,
)

__all__ = ["SUM_TOLERANCE_PER_OPTION", "InvalidResponse", "validate_response"]

SUM_TOLERANCE_PER_OPTION = 5e-5  # the API rounds to 4 decimals, so sums drift by n * 5e-5


class InvalidResponse(ValueError):
    """A response that breaks a validation rule; the message is a rule code (``ANSWER_KEYS``, …)."""


def _unit(value: float | None, code: str) -> float:
    if value is None or not math.isfinite(value) or not 0 <= value <= 1:
        raise InvalidResponse(code)
    return value


def _distribution(probabilities: Mapping[str, float | None], keys: set[str], code: str) -> None:
    if set(probabilities) != keys:
        raise InvalidResponse(f"{code}_KEYS")
    total = sum(_unit(p, f"{code}_PROBABILITY") for p in probabilities.values())
    if abs(total - 1) > SUM_TOLERANCE_PER_OPTION * len(keys):
        raise InvalidResponse(f"{code}_SUM")


def _check_choice(question: ChoiceQuestion, answer: ChoiceAnswer) -> None:
    options = set(question.criteria)
    if answer.choice not in options:
        raise InvalidResponse("CHOICE_LABEL")
    _distribution(answer.probabilities, options, "CHOICE")
    _unit(answer.confidence, "CHOICE_CONFIDENCE")


def _check_score(question: ScoreQuestion, answer: ScoreAnswer) -> None:
    levels = len(question.criteria)
    score = answer.score
    if score is None or not math.isfinite(score) or not 0 <= score <= levels - 1:
        raise InvalidResponse("SCORE_VALUE")
    keys = {str(i) for i in range(levels)}
    if set(answer.legend) != keys:
        raise InvalidResponse("SCORE_LEGEND_KEYS")
    _distribution(answer.probabilities, keys, "SCORE")
    _unit(answer.confidence, "SCORE_CONFIDENCE")


def _check_answer(question: object, answer: object) -> None:
    if isinstance(question, NoulQuestion) and isinstance(answer, NoulAnswer):
        _unit(answer.noul, "NOUL_VALUE")
    elif isinstance(question, ChoiceQuestion) and isinstance(answer, ChoiceAnswer):
        _check_choice(question, answer)
    elif isinstance(question, ScoreQuestion) and isinstance(answer, ScoreAnswer):
        _check_score(question, answer)
    else:
        raise InvalidResponse("ANSWER_TYPE")


def validate_response(request: JudgeRequest, response: object) -> JudgeResponse:
    """Return ``response`` if it satisfies every validation rule for ``request``; else raise."""
    if not isinstance(response, JudgeResponse):
        raise InvalidResponse("NOT_A_RESPONSE")
    if not response.model.strip():
        raise InvalidResponse("MODEL_BLANK")
    usage = response.usage
    if usage is None:
        raise InvalidResponse("USAGE_MISSING")
    if usage.input_tokens < 0 or usage.output_tokens < 0:
        raise InvalidResponse("USAGE_NEGATIVE")
    if set(response.answers) != set(request.questions):
        raise InvalidResponse("ANSWER_KEYS")
    for qid, question in request.questions.items():
        _check_answer(question, response.answers[qid])
    return response
