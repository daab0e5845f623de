"""Shared pieces of the built-in metrics (docs/semantics.md §5): precheck/state, answer readers.

Answers reach ``reduce`` after the evaluator's strict validation, so a reader that finds the
wrong answer type or a null value raises ``ValueError``: the evaluator records REDUCE_ERROR for
that metric only and no value is ever guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from worker.judges import Answer, ChoiceAnswer, NoulAnswer, Question, ScoreAnswer

from ._result import MetricResult, Reason, Status, Thresholds, scored

if TYPE_CHECKING:
    from ._trace import Trace

__all__ = [
    "VERSION_PREFIX",
    "FieldMetric",
    "invalid",
    "read_choice",
    "read_noul",
    "read_score",
    "version_of",
]

VERSION_PREFIX = "jevals-e9fb26a-as1-"
"""Names the adaptation: jevals commit e9fb26a, AgentScope semantics, our wording revision 1."""


def version_of(thresholds: Thresholds) -> str:
    """Metric version for a threshold pair (changes whenever the thresholds change)."""
    return VERSION_PREFIX + thresholds.tag()


def invalid(message: str) -> NoReturn:
    """Invalid arguments and definitions are ``ValueError`` (the public contract)."""
    raise ValueError(message)


class FieldMetric:
    """Base of the agent metrics: required fields gate the metric and form its state.

    Subclasses set ``id`` and ``required`` and implement ``questions`` and ``reduce``; they may
    override ``applicable`` for their extra SKIPPED rules and ``state`` to add keys.
    """

    id: str
    required: tuple[str, ...]

    def __init__(self, thresholds: Thresholds) -> None:
        if not isinstance(thresholds, Thresholds):
            invalid("thresholds must be a Thresholds instance")
        self._thresholds = thresholds
        self._version = version_of(thresholds)

    @property
    def version(self) -> str:
        """``jevals-e9fb26a-as1-<fail>-<pass>``."""
        return self._version

    @property
    def thresholds(self) -> Thresholds:
        """The thresholds this instance decides with."""
        return self._thresholds

    def precheck(self, trace: Trace) -> MetricResult | None:
        """SKIPPED ``MISSING_FIELDS`` unless every required field is present, then extra rules."""
        if not all(trace.has(key) for key in self.required):
            return MetricResult.skipped(Reason.MISSING_FIELDS)
        return self.applicable(trace)

    def applicable(self, trace: Trace) -> MetricResult | None:  # noqa: ARG002 - hook
        """Extra SKIPPED rules after the field check (none by default)."""
        return None

    def state(self, trace: Trace) -> Mapping[str, Any]:
        """``{field: trace value}`` for each required field, untouched (never truncated)."""
        return {key: trace.fields[key] for key in self.required}

    def questions(self, trace: Trace) -> Mapping[str, Question]:
        """Local question id -> question."""
        raise NotImplementedError

    def reduce(self, answers: Mapping[str, Answer], trace: Trace) -> MetricResult:
        """Answers -> result."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, version={self._version!r})"


def read_noul(answers: Mapping[str, Answer], qid: str) -> float:
    """P(yes) of a noul answer."""
    answer = answers[qid]
    if not isinstance(answer, NoulAnswer) or answer.noul is None:
        invalid(f"answer {qid} is not a noul probability")
    return answer.noul


def read_score(answers: Mapping[str, Answer], qid: str) -> float:
    """Expected level of a score answer."""
    answer = answers[qid]
    if not isinstance(answer, ScoreAnswer) or answer.score is None:
        invalid(f"answer {qid} is not a score")
    return answer.score


def read_choice(
    answers: Mapping[str, Answer], qid: str
) -> tuple[str, Mapping[str, float | None], float]:
    """``(choice, probabilities, confidence)`` of a complete choice answer."""
    answer = answers[qid]
    if not isinstance(answer, ChoiceAnswer) or answer.choice is None or answer.confidence is None:
        invalid(f"answer {qid} is not a complete choice")
    return answer.choice, answer.probabilities, answer.confidence


def decide_choice(
    answer: tuple[str, Mapping[str, float | None], float], metric_id: str, thresholds: Thresholds
) -> MetricResult:
    """A choice metric's result (``tool_choice``, ``call_appropriate``): DECIDED with passed =
    choice is ``correct`` when the confidence reaches the pass threshold, else INCONCLUSIVE;
    label = the choice, score = P(correct)."""
    choice, probabilities, confidence = answer
    p_correct = probabilities.get("correct")
    if p_correct is None:
        invalid(f"the {metric_id} answer has no probability for 'correct'")
    confident = confidence >= thresholds.pass_at_or_above
    status = Status.DECIDED if confident else Status.INCONCLUSIVE
    return scored(
        status,
        p_correct,
        (choice == "correct") if confident else None,
        choice,
        status.value,
        {"probabilities": dict(probabilities), "confidence": confidence},
    )


class JudgeFree:
    """The contract's judge-side methods for a deterministic metric: its result is
    :meth:`precheck`'s, it has no state and asks no question."""

    def precheck(self, trace: Trace) -> MetricResult:
        """The metric's whole result (deterministic)."""
        raise NotImplementedError

    def state(self, trace: Trace) -> Mapping[str, Any]:  # noqa: ARG002 - contract signature
        """No state: the judge is never asked."""
        return {}

    def questions(self, trace: Trace) -> Mapping[str, Question]:  # noqa: ARG002
        """No questions."""
        return {}

    def reduce(self, answers: Mapping[str, Answer], trace: Trace) -> MetricResult:  # noqa: ARG002
        """The same deterministic result as :meth:`precheck`."""
        return self.precheck(trace)
