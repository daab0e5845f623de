"""A deterministic judge with no network, for pipelines, demos and tests.

Every response says ``model="synthetic"`` so nobody mistakes its answers for a model's judgment.
The same answers are served over HTTP by :mod:`worker.judges.testing`.
"""

from __future__ import annotations

import asyncio
import math

from worker.canonical_json import key_json, utf16_units

from ._strict import content_text
from ._wire import (
    Answer,
    ChoiceAnswer,
    ChoiceQuestion,
    JudgeRequest,
    JudgeResponse,
    NoulAnswer,
    NoulQuestion,
    Question,
    ScoreAnswer,
    ScoreQuestion,
    Usage,
)

__all__ = ["SYNTHETIC_MODEL", "SyntheticJudge", "synthetic_response", "synthetic_usage"]

SYNTHETIC_MODEL = "synthetic"
# Questions where "yes" is the *bad* outcome; inverting them keeps a synthetic run passing.
_INVERTED_PREFIX = "indirect_injection."
_INVERTED_SUFFIX = ".noncommittal"
_CHARS_PER_TOKEN = 4  # a rough, deterministic stand-in for a tokenizer


def _noul(question_id: str, p_yes: float) -> NoulAnswer:
    inverted = question_id.startswith(_INVERTED_PREFIX) or question_id.endswith(_INVERTED_SUFFIX)
    return NoulAnswer(noul=1.0 - p_yes if inverted else p_yes)


def _choice(question: ChoiceQuestion) -> ChoiceAnswer:
    first = next(iter(question.criteria))
    probabilities = {label: 1.0 if label == first else 0.0 for label in question.criteria}
    return ChoiceAnswer(choice=first, probabilities=probabilities, confidence=1.0)


def _score(question: ScoreQuestion) -> ScoreAnswer:
    top = len(question.criteria) - 1
    legend = {str(i): content_text(level) for i, level in enumerate(question.criteria)}
    probabilities = {str(i): 1.0 if i == top else 0.0 for i in range(top + 1)}
    return ScoreAnswer(score=float(top), legend=legend, probabilities=probabilities, confidence=1.0)


def _answer(question_id: str, question: Question, p_yes: float) -> Answer:
    if isinstance(question, NoulQuestion):
        return _noul(question_id, p_yes)
    if isinstance(question, ChoiceQuestion):
        return _choice(question)
    return _score(question)


def wire_units(request: JudgeRequest) -> int:
    """``json_size(request.wire())``, written from the request's own texts.

    The same number (tests/judges/test_judges_synthetic.py compares them over generated
    requests) without dumping and re-serializing the request, which was a third of the judge
    server's own work per request.
    """
    parts = ['{"state":', request.state_json(), ',"questions":', request.questions_json()]
    if request.model is not None:
        parts += [',"model":', key_json(request.model)]
    return utf16_units("".join(parts) + "}")


def synthetic_usage(units: int, questions: int) -> Usage:
    """The usage a synthetic reply reports: a request of ``units`` wire units, one output token
    per question."""
    return Usage(input_tokens=units // _CHARS_PER_TOKEN, output_tokens=questions)


def synthetic_response(request: JudgeRequest, p_yes: float) -> JudgeResponse:
    """The synthetic answers to ``request`` (usage included, so strict validation passes)."""
    answers = {qid: _answer(qid, q, p_yes) for qid, q in request.questions.items()}
    usage = synthetic_usage(wire_units(request), len(request.questions))
    return JudgeResponse(model=SYNTHETIC_MODEL, answers=answers, usage=usage)


def _check_unit(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number")
    return float(value)


class SyntheticJudge:
    """``SyntheticJudge(p_yes=0.95, delay_s=0.0)``: fixed answers, optional (cancellable) delay.

    noul → ``p_yes`` (``1 - p_yes`` for ``indirect_injection.*`` and ``*.noncommittal``), choice →
    the first option with p=1, score → the top level with p=1.
    """

    def __init__(self, p_yes: float = 0.95, delay_s: float = 0.0) -> None:
        self._p_yes = _check_unit("p_yes", p_yes)
        if not 0.0 <= self._p_yes <= 1.0:
            raise ValueError("p_yes must be in [0, 1]")
        self._delay_s = _check_unit("delay_s", delay_s)
        if self._delay_s < 0:
            raise ValueError("delay_s must be >= 0")

    @property
    def model(self) -> str:
        """Always ``"synthetic"``."""
        return SYNTHETIC_MODEL

    def __repr__(self) -> str:
        return f"SyntheticJudge(p_yes={self._p_yes!r}, delay_s={self._delay_s!r})"

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Answer after ``delay_s`` (an ``asyncio.sleep``, so cancellation stops it at once)."""
        if self._delay_s > 0:
            await asyncio.sleep(self._delay_s)
        return synthetic_response(request, self._p_yes)
