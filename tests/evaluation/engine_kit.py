"""Small custom metrics and in-process judges for the engine tests.

The judges here are injected callables (the evaluator's true seam), not network fakes: the
engine's contract is about what it does with whatever a judge returns or raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.evaluation import MetricResult, Reason, Status, Trace
from worker.judges import (
    Answer,
    ChoiceAnswer,
    ChoiceQuestion,
    JudgeRequest,
    JudgeResponse,
    NoulAnswer,
    NoulQuestion,
    ScoreAnswer,
    ScoreQuestion,
    Usage,
)

__all__ = [
    "CANARY",
    "BlockingJudge",
    "BoomError",
    "Probe",
    "ScriptedJudge",
    "answer_all",
    "make_trace",
    "noul",
]

CANARY = "CANARY-7f3a-SENSITIVE"
"""Planted in exception messages; it must never show up in a report or a log line."""


class BoomError(RuntimeError):
    """An exception whose message carries the canary."""

    def __init__(self) -> None:
        super().__init__(f"leaked {CANARY}")


def make_trace(trace_id: str = "t1", issues: tuple[str, ...] = (), **fields: Any) -> Trace:
    """A trace built from plain fields (the engine only needs id, fields and issues)."""
    return Trace.from_fields(trace_id, fields, issues=issues)


def noul(text: str = "Is it so?") -> NoulQuestion:
    """A minimal noul question."""
    return NoulQuestion(instructions=text)


def _answer(question: object, p: float) -> Answer:
    if isinstance(question, ChoiceQuestion):
        first, *rest = list(question.criteria)
        probabilities = {first: 1.0} | dict.fromkeys(rest, 0.0)
        return ChoiceAnswer(choice=first, probabilities=probabilities, confidence=1.0)
    if isinstance(question, ScoreQuestion):
        levels = len(question.criteria)
        top = str(levels - 1)
        return ScoreAnswer(
            score=float(levels - 1),
            legend={str(i): str(i) for i in range(levels)},
            probabilities={str(i): 0.0 for i in range(levels)} | {top: 1.0},
            confidence=1.0,
        )
    return NoulAnswer(noul=p)


def answer_all(
    request: JudgeRequest,
    p: float = 0.9,
    usage: Usage | None = None,
    model: str = "test-judge",
) -> JudgeResponse:
    """A strictly valid response to ``request`` (noul -> p, choice -> first, score -> top)."""
    return JudgeResponse(
        model=model,
        answers={qid: _answer(q, p) for qid, q in request.questions.items()},
        usage=Usage(input_tokens=10, output_tokens=2) if usage is None else usage,
    )


Reply = Callable[[JudgeRequest, int], Any]
"""Given a request and its 0-based call number: a reply to return, or an exception to raise."""


@dataclass
class ScriptedJudge:
    """Answers every request validly unless ``reply`` says otherwise; records every request."""

    reply: Reply | None = None
    p: float = 0.9
    requests: list[JudgeRequest] = field(default_factory=list)

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Record the request, then return or raise what the script says."""
        call = len(self.requests)
        self.requests.append(request)
        await asyncio.sleep(0)  # a real judge always yields to the loop at least once
        outcome = answer_all(request, self.p) if self.reply is None else self.reply(request, call)
        if isinstance(outcome, BaseException):
            raise outcome
        response: JudgeResponse = outcome
        return response


@dataclass
class BlockingJudge:
    """Answers the first ``answered`` requests validly, then blocks on an event never set.

    ``entered`` is set when a blocking call starts; ``cancelled`` counts calls that saw
    ``CancelledError`` (the evaluator must cancel the in-flight request).
    """

    answered: int = 0
    calls: int = 0
    cancelled: int = 0
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    _never: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        """Answer or block forever (until cancelled)."""
        self.calls += 1
        if self.calls <= self.answered:
            await asyncio.sleep(0)
            return answer_all(request)
        self.entered.set()
        try:
            await self._never.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("the never-set event was set")


def _default_reduce(answers: Mapping[str, Answer], _trace: Trace) -> MetricResult:
    """DECIDED, passed iff every noul p >= 0.5; the local ids seen go into the evidence."""
    ps = [a.noul for a in answers.values() if isinstance(a, NoulAnswer) and a.noul is not None]
    score = sum(ps) / len(ps) if ps else 1.0
    return MetricResult(
        status=Status.DECIDED,
        score=score,
        passed=all(p >= 0.5 for p in ps),
        reason=Reason.DECIDED,
        evidence={"qids": sorted(answers)},
    )


@dataclass
class Probe:
    """A configurable custom metric that records how the evaluator used it.

    ``questions`` maps local ids to questions (default: one noul ``q``). ``fail_in`` names a step
    (``precheck``, ``state``, ``questions``, ``reduce``) that raises :class:`BoomError`.
    """

    id: str
    state_value: Any = field(default_factory=dict)
    questions_value: Any = None
    version: str = "v1"
    early: Any = None
    fail_in: str | None = None
    reducer: Callable[[Mapping[str, Answer], Trace], Any] = _default_reduce
    seen_answers: list[Mapping[str, Answer]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_in == name:
            raise BoomError

    def precheck(self, trace: Trace) -> Any:
        """Return ``early`` (None continues)."""
        self._step("precheck")
        return self.early

    def state(self, trace: Trace) -> Any:
        """Return ``state_value`` as is (the evaluator must snapshot it)."""
        self._step("state")
        return self.state_value

    def questions(self, trace: Trace) -> Any:
        """Return ``questions_value``, or one noul question ``q`` by default."""
        self._step("questions")
        return {"q": noul()} if self.questions_value is None else self.questions_value

    def reduce(self, answers: Mapping[str, Answer], trace: Trace) -> Any:
        """Record the answers, then apply ``reducer``."""
        self._step("reduce")
        self.seen_answers.append(answers)
        return self.reducer(answers, trace)
