"""Planning and first-fit packing (docs/semantics.md §6.1): what each metric needs, in how few
judge requests.

:class:`Planner` settles every metric that needs no judge (incomplete trace, precheck, limits,
no questions, a broken definition) and packs the others into :class:`Group` s: the first group
with room whose shared state keys hold identical values (canonical JSON, not ``==``). Nothing is
ever truncated to fit, and a value is never overwritten.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from worker.canonical_json import JsonValue, freeze, frozen_json, key_json, utf16_units
from worker.judges import ChoiceQuestion, JudgeRequest, NoulQuestion, Question, ScoreQuestion

from ._metric import check_id
from ._result import MetricResult, Reason

if TYPE_CHECKING:
    from worker.judges import Answer

    from ._limits import Limits
    from ._metric import Metric
    from ._trace import Trace

__all__ = ["Group", "Member", "Planner", "build_request", "log_failure"]

_log = logging.getLogger(__name__)
_QUESTION: TypeAdapter[Question] = TypeAdapter(Question)
_QUESTION_TYPES = (NoulQuestion, ChoiceQuestion, ScoreQuestion)
_NO_ANSWERS: Mapping[str, Answer] = MappingProxyType({})


class _DefinitionError(Exception):
    """A metric broke its contract during planning (reported as DEFINITION_ERROR)."""


@dataclass(frozen=True)
class _Ask:
    """A metric that needs the judge: its frozen state and its validated local questions."""

    state: Mapping[str, JsonValue]
    canon: Mapping[str, str]
    questions: Mapping[str, Question]
    sizes: Mapping[str, int]  # per key: the UTF-16 size of its `"key":value` member


@dataclass(frozen=True)
class Member:
    """A metric packed into a group: its configuration index and its local question ids."""

    index: int
    metric: Metric
    qids: tuple[str, ...]


@dataclass
class Group:
    """One packed request under construction: merged state, namespaced questions, members."""

    state: dict[str, JsonValue] = field(default_factory=dict)
    canon: dict[str, str] = field(default_factory=dict)
    questions: dict[str, Question] = field(default_factory=dict)
    members: list[Member] = field(default_factory=list)
    size: int = 2  # UTF-16 size of the merged state's compact JSON ("{}" when empty)


class Planner:
    """Plans one evaluation's metrics under :class:`~worker.evaluation.Limits`."""

    def __init__(self, metrics: tuple[Metric, ...], ids: tuple[str, ...], limits: Limits) -> None:
        self._metrics = metrics
        self._ids = ids
        self._limits = limits

    def plan(
        self,
        trace: Trace,
        results: list[MetricResult | None],
        asked: dict[int, tuple[str, ...]],
    ) -> list[Group]:
        """The packed groups; ``results`` gets every metric settled here, ``asked`` the local
        question ids of every metric that needs the judge (both by configuration index)."""
        groups: list[Group] = []
        incomplete = bool(trace.issues)
        values = _TraceValues(trace)
        for index, metric in enumerate(self._metrics):
            if incomplete:
                results[index] = MetricResult.skipped(Reason.INCOMPLETE_TRACE)
                continue
            try:
                planned = self._prepare(metric, trace, values)
                if isinstance(planned, _Ask):
                    asked[index] = tuple(planned.questions)
                    self._pack(groups, Member(index, metric, asked[index]), planned)
                else:
                    results[index] = planned
            except Exception as exc:  # noqa: BLE001 - isolation: only this metric fails
                log_failure(self._ids[index], Reason.DEFINITION_ERROR, exc)
                results[index] = MetricResult.error(Reason.DEFINITION_ERROR)
        return groups

    def _prepare(self, metric: Metric, trace: Trace, values: _TraceValues) -> MetricResult | _Ask:
        precheck = getattr(metric, "precheck", None)
        early = None if precheck is None else precheck(trace)
        if early is not None:
            return _final(early)
        state, canon, sizes = _snapshot_state(metric.state(trace), values)
        questions = _snapshot_questions(metric.questions(trace))
        # Limits are checked before the no-question shortcut, and nothing is ever truncated.
        if len(questions) > self._limits.max_questions or (
            _object_size(sizes.values()) > self._limits.max_state_chars
        ):
            return MetricResult.skipped(Reason.EVALUATION_LIMIT)
        if not questions:
            return _final(metric.reduce(_NO_ANSWERS, trace))
        validated = {qid: _validate_question(q) for qid, q in questions.items()}
        return _Ask(state, canon, validated, sizes)

    def _pack(self, groups: list[Group], member: Member, ask: _Ask) -> None:
        """First fit: the first group with room whose shared keys hold identical values."""
        for group in groups:
            size = self._fitted_size(group, ask)
            if size is not None:
                break
        else:
            group = Group()
            groups.append(group)
            size = self._merged_size(group, ask)
        group.size = size
        state, canon = group.state, group.canon
        for key, text in ask.canon.items():
            if key not in canon:  # a shared key holds the same text already: never replaced
                state[key] = ask.state[key]
                canon[key] = text
        metric_id = self._ids[member.index]
        group.questions.update({f"{metric_id}.{qid}": q for qid, q in ask.questions.items()})
        group.members.append(member)

    def _fitted_size(self, group: Group, ask: _Ask) -> int | None:
        """The merged state's size if ``ask`` fits into ``group``, else None."""
        if len(group.questions) + len(ask.questions) > self._limits.max_questions:
            return None
        canon = group.canon
        # Canonical JSON, not ==: True, 1 and 1.0 are different evidence for the judge.
        for key, text in ask.canon.items():
            if canon.get(key, text) != text:
                return None
        size = self._merged_size(group, ask)
        return size if size <= self._limits.max_state_chars else None

    @staticmethod
    def _merged_size(group: Group, ask: _Ask) -> int:
        """The merged state's JSON size, from the members' sizes (shared keys hold equal text)."""
        canon = group.canon
        added = [size for key, size in ask.sizes.items() if key not in canon]
        if not added:
            return group.size
        commas = len(added) - (0 if canon else 1)
        return group.size + sum(added) + commas


def build_request(group: Group) -> JudgeRequest:
    """The group's request from what planning made: frozen state values, validated questions
    with checked ids, and each value's canonical text (its state is serialized once)."""
    members = (f"{key_json(key)}:{group.canon[key]}" for key in group.state)
    state_text = "{" + ",".join(members) + "}"
    return JudgeRequest.planned(group.state, group.questions, state_text)


def _final(result: object) -> MetricResult:
    if not isinstance(result, MetricResult):
        raise _DefinitionError("precheck/reduce must return a MetricResult")
    return result


@functools.lru_cache(maxsize=4096)
def _key_size(key: str) -> int:
    """UTF-16 size of a key in compact JSON (state keys repeat in every evaluation)."""
    return utf16_units(key_json(key))


def _object_size(member_sizes: Iterable[int]) -> int:
    """UTF-16 size of a compact JSON object with members of these sizes."""
    sizes = list(member_sizes)
    return 2 + sum(sizes) + max(len(sizes) - 1, 0)


class _TraceValues:
    """One plan's memo of the trace's own field values (already frozen by the trace).

    Metric states mostly hand back those very objects: they are reused instead of deep-copied
    again, and serialized once however many states hold them (measured: re-freezing and
    re-serializing them was ~40% of the engine's planning CPU). Holding the values keeps their
    ids unique for the memo's lifetime.
    """

    def __init__(self, trace: Trace) -> None:
        self._own = {id(v): v for v in trace.fields.values()}
        self._entries: dict[int, tuple[JsonValue, str, int]] = {}

    def entry(self, value: object) -> tuple[JsonValue, str, int]:
        """``value`` frozen (itself if it is one of the trace's values), its canonical JSON and
        that text's UTF-16 size; computed once per trace value."""
        key = id(value)
        found = self._entries.get(key)
        if found is not None:
            return found
        if key not in self._own:
            frozen = freeze(value)
            return (frozen, *_text_and_size(frozen))
        found = self._entries[key] = (value, *_text_and_size(value))
        return found


def _text_and_size(value: object) -> tuple[str, int]:
    text = frozen_json(value)  # every caller passes a frozen value
    return text, utf16_units(text)


def _snapshot_state(
    state: object, values: _TraceValues
) -> tuple[Mapping[str, JsonValue], dict[str, str], dict[str, int]]:
    """A deep, frozen copy of a metric's state (a JSON object with string keys), with each
    value's canonical text and each ``"key":value`` member's UTF-16 size, in one pass."""
    if type(state) is not dict and not isinstance(state, Mapping):  # exact type: no ABC check
        raise _DefinitionError("state must be a JSON object")
    frozen: dict[str, JsonValue] = {}
    canon: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for key, value in state.items():
        if type(key) is not str and not isinstance(key, str):
            raise _DefinitionError("state keys must be strings")
        frozen[key], canon[key], size = values.entry(value)
        sizes[key] = _key_size(key) + 1 + size
    return MappingProxyType(frozen), canon, sizes


def _snapshot_questions(questions: object) -> dict[str, object]:
    if type(questions) is not dict and not isinstance(questions, Mapping):
        raise _DefinitionError("questions must be a mapping")
    snapshot = dict(questions)
    for qid in snapshot:
        _check_question_id(qid)
    return snapshot


@functools.lru_cache(maxsize=4096)
def _check_question_id(qid: str) -> str:
    return check_id(qid, "question id")  # local ids repeat in every evaluation


def _validate_question(question: object) -> Question:
    if type(question) in _QUESTION_TYPES or isinstance(question, _QUESTION_TYPES):
        return question  # type: ignore[return-value]  # one of the three question models
    return _QUESTION.validate_python(question)


def log_failure(metric_id: str, reason: str, exc: Exception) -> None:
    # The exception *type* only: messages may quote evidence, keys or model output.
    _log.warning("metric %s: %s (%s)", metric_id, reason, type(exc).__name__)
