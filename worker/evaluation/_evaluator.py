"""The trace evaluator: planning, first-fit packing and budgeted execution (docs/semantics.md §6).

``Evaluator(judge, metrics, limits).evaluate(trace)`` plans every metric in configuration order,
packs the metrics that ask questions into as few judge requests as their shared state allows, and
runs those requests one after another under a single deadline. Whatever happens inside a metric or
a judge becomes a reason code in the :class:`Report`; only the caller's own cancellation escapes.
A caller that cancels an evaluation itself (a backstop) passes a :class:`Progress` and gets what
had finished from :meth:`Evaluator.interrupted_report`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from worker._models import assemble
from worker.canonical_json import (
    JsonValue,
    freeze,
    frozen_json,
    key_json,
    utf16_units,
)
from worker.judges import (
    ChoiceQuestion,
    InvalidReply,
    JudgeRequest,
    JudgeResponse,
    NoulQuestion,
    Question,
    ScoreQuestion,
    Usage,
    check_async_judge,
    use_deadline,
    validate_response,
    validates_replies,
)

from . import _trace
from ._metric import check_id
from ._result import MetricResult, Reason, Status

if TYPE_CHECKING:
    from worker.judges import Answer, Judge

    from ._metric import Metric
    from ._trace import Trace

__all__ = ["MAX_METRICS", "Entry", "Evaluator", "Limits", "Progress", "Report", "RequestUsage"]

MAX_METRICS = 128

_log = logging.getLogger(__name__)
_QUESTION: TypeAdapter[Question] = TypeAdapter(Question)
_QUESTION_TYPES = (NoulQuestion, ChoiceQuestion, ScoreQuestion)
_NO_ANSWERS: Mapping[str, Answer] = MappingProxyType({})
_TIMEOUT = MetricResult.error(Reason.TIMEOUT)  # frozen: one instance serves every report


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(BaseModel):
    """One evaluation's total time budget and its question and state-size caps (all positive)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    budget_s: float = Field(default=3.0, gt=0)
    max_questions: int = Field(default=128, gt=0)
    max_state_chars: int = Field(default=100_000, gt=0)

    def __init__(
        self,
        budget_s: float = 3.0,
        max_questions: int = 128,
        max_state_chars: int = 100_000,
        **kw: Any,
    ) -> None:
        # Strict mode rejects ints for a float field; a whole-second budget is still a budget.
        if isinstance(budget_s, int) and not isinstance(budget_s, bool):
            budget_s = float(budget_s)
        super().__init__(
            budget_s=budget_s, max_questions=max_questions, max_state_chars=max_state_chars, **kw
        )

    @field_validator("budget_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("budget_s must be finite")
        return value


class RequestUsage(_Frozen):
    """Usage of one judge request: the answering model and its usage, ``None`` where unknown.

    One entry per response received (``usage=None``: the judge did not say), and, in an
    :meth:`~Evaluator.interrupted_report` only, ``model=None, usage=None`` for a request that
    was still waiting for its response when the caller stopped the evaluation.
    """

    model: str | None
    usage: Usage | None


_UNKNOWN_USAGE = RequestUsage(model=None, usage=None)  # a request sent with no reply


class Entry(_Frozen):
    """One configured metric's result, tagged with the metric's id and version."""

    id: str
    version: str
    result: MetricResult
    asked: tuple[str, ...] = ()
    """The metric's local question ids planned for the judge (empty if it needed none)."""


class Report(_Frozen):
    """The outcome of one ``evaluate``: one entry per configured metric, in configuration order.

    ``requests`` counts packed requests *started* (timed-out and failed ones included); ``usage``
    has one entry per response received (see :class:`RequestUsage` for an interrupted one), so
    fewer entries than requests, or an entry with ``usage=None``, means the cost is incomplete,
    not zero. ``model_dump(mode="json")`` gives the JSON form for stores.
    """

    trace_id: str
    results: tuple[Entry, ...]
    requests: int = Field(ge=0)
    usage: tuple[RequestUsage, ...]
    elapsed_s: float = Field(ge=0)

    def passed(self) -> bool:
        """True iff there is at least one result and every result is DECIDED with passed=True."""
        return bool(self.results) and all(
            e.result.status is Status.DECIDED and e.result.passed is True for e in self.results
        )

    def result(self, metric_id: str) -> MetricResult:
        """The result of ``metric_id``; ``KeyError`` if no such metric was configured."""
        for entry in self.results:
            if entry.id == metric_id:
                return entry.result
        raise KeyError(metric_id)


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
class _Member:
    index: int
    metric: Metric
    qids: tuple[str, ...]


@dataclass
class _Group:
    """One packed request under construction: merged state, namespaced questions, members."""

    state: dict[str, JsonValue] = field(default_factory=dict)
    canon: dict[str, str] = field(default_factory=dict)
    questions: dict[str, Question] = field(default_factory=dict)
    members: list[_Member] = field(default_factory=list)
    size: int = 2  # UTF-16 size of the merged state's compact JSON ("{}" when empty)


# Built with assemble() from checked parts (model_construct's per-field lookups cost ~3 us each,
# nine instances per evaluation): every field is set, as model_construct(**all fields) sets it.
_ENTRY_FIELDS = frozenset(Entry.model_fields)
_REPORT_FIELDS = frozenset(Report.model_fields)
_USAGE_FIELDS = frozenset(RequestUsage.model_fields)


@dataclass
class _Run:
    """Mutable bookkeeping of one ``evaluate`` call."""

    results: list[MetricResult | None]
    requests: int = 0
    awaiting: int = 0  # requests sent whose reply has not come back (one at most)
    usage: list[RequestUsage] = field(default_factory=list)
    asked: dict[int, tuple[str, ...]] = field(default_factory=dict)


class Progress:
    """What one evaluation has done so far, for a caller that may stop it from outside.

    Create one per evaluation and pass it to :meth:`Evaluator.evaluate`, which records into it as
    it goes (the results settled, the requests sent, the usage received). If the caller cancels
    the evaluation (a backstop above the budget, for a judge that ignores cancellation),
    :meth:`Evaluator.interrupted_report` turns it into a :class:`Report`. A ``Progress`` records
    exactly one evaluation (reusing one is a ``ValueError``). Read it on the evaluation's own
    event loop: it is plain mutable state. Read from another thread (a loop that is blocked), it
    is a best-effort snapshot: each result is either settled or TIMEOUT, and a request awaiting
    its reply may be counted as unknown usage after its reply came, never missed.
    """

    __slots__ = ("_evaluator", "_run", "_trace_id")

    def __init__(self) -> None:
        self._evaluator: Evaluator | None = None
        self._trace_id: str | None = None
        self._run: _Run | None = None

    @property
    def requests(self) -> int:
        """Judge requests sent so far."""
        return 0 if self._run is None else self._run.requests

    @property
    def awaiting(self) -> int:
        """Requests sent whose reply has not come back (0 or 1: groups run one at a time)."""
        return 0 if self._run is None else self._run.awaiting

    def _attach(self, evaluator: Evaluator, trace_id: str, run: _Run) -> None:
        if self._run is not None:
            raise ValueError("a Progress records one evaluation: pass a new one to each evaluate()")
        self._evaluator, self._trace_id, self._run = evaluator, trace_id, run

    def _run_of(self, evaluator: Evaluator, trace_id: str, metrics: int) -> _Run:
        """The recorded run, or an empty one if the evaluation never started."""
        if self._run is None:
            return _Run(results=[None] * metrics)
        if self._evaluator is not evaluator or self._trace_id != trace_id:
            raise ValueError("this Progress recorded another evaluator's or another trace's run")
        return self._run


@dataclass(frozen=True)
class _Outcome:
    """What one judge call produced: a failure reason (or None), usage, the valid response."""

    reason: str | None
    usage: RequestUsage | None = None
    response: JudgeResponse | None = None


class Evaluator:
    """Evaluate traces with a fixed list of metrics and one judge, under :class:`Limits`.

    Construction validates eagerly (``ValueError``): 1..128 metrics, ids matching
    ``^[A-Za-z][A-Za-z0-9_]{0,63}$`` and unique (the same instance twice is a duplicate), and a
    non-blank version for each.

    The judge must be an async callable: an ``async def`` function (or a partial or bound method
    of one) or an instance whose class has ``async def __call__``. Anything else is refused with
    ``TypeError`` here, not run off the event loop: a synchronous judge would block every
    evaluation on the loop, and no deadline can interrupt it (a thread cannot be cancelled, so
    an abandoned call would keep its request and its thread going past the budget). A judge that
    is async but blocks inside is not detectable; the caller's backstop is for that.
    """

    def __init__(
        self, judge: Judge, metrics: Iterable[Metric], limits: Limits | None = None
    ) -> None:
        check_async_judge(judge)  # TypeError: see the class docstring
        limits = Limits() if limits is None else limits
        if not isinstance(limits, Limits):
            raise ValueError("limits must be a Limits instance")  # noqa: TRY004 - see above
        self._judge = judge
        # A judge that promises validated replies is not re-checked (see the Judge protocol).
        self._trusted = validates_replies(judge)
        self._limits = limits
        self._metrics = tuple(metrics)
        self._ids, self._versions = _identities(self._metrics)

    @property
    def metric_ids(self) -> tuple[str, ...]:
        """The configured metric ids, in configuration order."""
        return self._ids

    @property
    def limits(self) -> Limits:
        """The limits every evaluation runs under."""
        return self._limits

    async def evaluate(self, trace: Trace, progress: Progress | None = None) -> Report:
        """Evaluate one trace. Cancelling the caller propagates and produces no report.

        With ``progress``, everything done is recorded into it as it happens, so a caller that
        cancels the evaluation still gets what had finished from :meth:`interrupted_report`.
        ``ValueError`` if ``trace`` is not a :class:`Trace` or ``progress`` is not a fresh
        :class:`Progress`; nothing else escapes.
        """
        if not isinstance(trace, _trace.Trace):
            raise ValueError("evaluate() needs a Trace")  # noqa: TRY004 - contract: ValueError
        started = time.monotonic()
        deadline = started + self._limits.budget_s  # planning time counts against the budget
        run = _Run(results=[None] * len(self._metrics))
        if progress is not None:
            if not isinstance(progress, Progress):
                raise ValueError("progress must be a Progress")
            progress._attach(self, trace.id, run)
        groups = self._plan(trace, run)
        await self._execute(groups, trace, deadline, run)
        return self._report(trace.id, run, tuple(run.usage), max(0.0, time.monotonic() - started))

    def interrupted_report(self, trace: Trace, progress: Progress, elapsed_s: float) -> Report:
        """The report of an evaluation of ``trace`` that the caller cancelled from outside.

        Every result settled before the cancel is kept as it was (answered groups, prechecks,
        deterministic metrics, SKIPPED and ERROR ones); every other metric is ERROR/TIMEOUT.
        ``requests`` counts the requests actually sent, and ``usage`` holds the usage of every
        response received plus one unknown entry (``model=None, usage=None``) for the request
        still waiting for its reply. A ``progress`` never passed to :meth:`evaluate` (cancelled
        before it started) gives all TIMEOUT, no requests. ``elapsed_s`` is the caller's
        measure of the evaluation's time. ``ValueError`` for a non-Trace, a non-Progress, a
        progress of another evaluator or trace, or a negative or non-finite ``elapsed_s``.
        """
        if not isinstance(trace, _trace.Trace):
            raise ValueError("interrupted_report() needs a Trace")  # noqa: TRY004 - contract
        if not isinstance(progress, Progress):
            raise ValueError("progress must be a Progress")  # noqa: TRY004 - contract
        if isinstance(elapsed_s, bool) or not (
            isinstance(elapsed_s, int | float) and math.isfinite(elapsed_s) and elapsed_s >= 0
        ):
            raise ValueError("elapsed_s must be a finite number >= 0")
        run = progress._run_of(self, trace.id, len(self._metrics))
        usage = (*run.usage, *(_UNKNOWN_USAGE,) * run.awaiting)
        return self._report(trace.id, run, usage, float(elapsed_s))

    # -- planning (docs/semantics.md §6.1) ---------------------------------------------------------

    def _plan(self, trace: Trace, run: _Run) -> list[_Group]:
        groups: list[_Group] = []
        incomplete = bool(trace.issues)
        values = _TraceValues(trace)
        for index, metric in enumerate(self._metrics):
            if incomplete:
                run.results[index] = MetricResult.skipped(Reason.INCOMPLETE_TRACE)
                continue
            try:
                planned = self._prepare(metric, trace, values)
                if isinstance(planned, _Ask):
                    run.asked[index] = tuple(planned.questions)
                    self._pack(groups, _Member(index, metric, run.asked[index]), planned)
                else:
                    run.results[index] = planned
            except Exception as exc:  # noqa: BLE001 - isolation: only this metric fails
                _log_failure(self._ids[index], Reason.DEFINITION_ERROR, exc)
                run.results[index] = MetricResult.error(Reason.DEFINITION_ERROR)
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

    def _pack(self, groups: list[_Group], member: _Member, ask: _Ask) -> None:
        """First fit: the first group with room whose shared keys hold identical values."""
        for group in groups:
            size = self._fitted_size(group, ask)
            if size is not None:
                break
        else:
            group = _Group()
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

    def _fitted_size(self, group: _Group, ask: _Ask) -> int | None:
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
    def _merged_size(group: _Group, ask: _Ask) -> int:
        """The merged state's JSON size, from the members' sizes (shared keys hold equal text)."""
        canon = group.canon
        added = [size for key, size in ask.sizes.items() if key not in canon]
        if not added:
            return group.size
        commas = len(added) - (0 if canon else 1)
        return group.size + sum(added) + commas

    # -- execution (docs/semantics.md §6.2) --------------------------------------------------------

    async def _execute(
        self, groups: list[_Group], trace: Trace, deadline: float, run: _Run
    ) -> None:
        """Run the groups in order under one deadline; unfinished metrics stay ``None``."""
        remaining_s = deadline - time.monotonic()
        if not groups or remaining_s <= 0:
            return
        task = asyncio.current_task()
        assert task is not None  # evaluate() is a coroutine, so it always runs in a task
        baseline = task.cancelling()
        try:
            async with asyncio.timeout(remaining_s) as scope:
                guard = _Guard(scope, task, baseline, deadline)
                for group in groups:
                    await self._run_group(group, trace, run, guard)
        except TimeoutError:
            return  # our own deadline; an outer cancellation propagates as CancelledError

    async def _run_group(self, group: _Group, trace: Trace, run: _Run, guard: _Guard) -> None:
        guard.check()  # never start a request with no time left, or after an outer cancel
        request = _request(group)
        run.requests += 1
        run.awaiting += 1  # stays counted if the call is cancelled: sent, and no reply came
        reply = await _ask_judge(self._judge, request, guard.deadline)
        outcome = _classify(request, reply, trusted=self._trusted)
        if outcome.usage is not None:
            run.usage.append(outcome.usage)  # once per response, never per member
        run.awaiting -= 1  # after the usage: a reader in between over-counts, never misses it
        guard.check()
        for member in group.members:
            run.results[member.index] = self._settle(member, outcome, trace)

    def _settle(self, member: _Member, outcome: _Outcome, trace: Trace) -> MetricResult:
        if outcome.response is None:
            return MetricResult.error(outcome.reason or Reason.INVALID_RESPONSE)
        metric_id = self._ids[member.index]
        answers = {qid: outcome.response.answers[f"{metric_id}.{qid}"] for qid in member.qids}
        try:
            result = member.metric.reduce(MappingProxyType(answers), trace)
        except Exception as exc:  # noqa: BLE001 - isolation: only this metric fails
            _log_failure(metric_id, Reason.REDUCE_ERROR, exc)
            return MetricResult.error(Reason.REDUCE_ERROR)
        if not isinstance(result, MetricResult):
            return MetricResult.error(Reason.REDUCE_ERROR)
        return result

    def _report(
        self, trace_id: str, run: _Run, usage: tuple[RequestUsage, ...], elapsed_s: float
    ) -> Report:
        # Built without re-validation: ids and versions were checked at construction, every
        # result is a MetricResult (checked where it was produced), the rest is counted here
        # (measured: validating the report and its entries was ~2% of a worker's engine CPU).
        entries = tuple(
            assemble(
                Entry,
                {
                    "id": metric_id,
                    "version": version,
                    "result": _TIMEOUT if result is None else result,
                    "asked": run.asked.get(index, ()),
                },
                set(_ENTRY_FIELDS),
            )
            for index, (metric_id, version, result) in enumerate(
                zip(self._ids, self._versions, run.results, strict=True)
            )
        )
        values = {
            "trace_id": trace_id,
            "results": entries,
            "requests": run.requests,
            "usage": usage,
            "elapsed_s": elapsed_s,
        }
        return assemble(Report, values, set(_REPORT_FIELDS))


@dataclass(frozen=True)
class _Guard:
    """Checks the deadline and outer cancellation around each judge call.

    A well-behaved judge lets ``CancelledError`` through and ``asyncio.timeout`` does the rest.
    A judge that swallows it must not turn a timeout into BACKEND_ERROR, nor an outer
    cancellation into a report or a further request, so both are re-raised here.
    """

    scope: asyncio.Timeout
    task: asyncio.Task[Any]
    baseline: int
    deadline: float

    def check(self) -> None:
        """Raise ``CancelledError`` on an outer cancel, ``TimeoutError`` past the deadline."""
        expired = self.scope.expired()
        if self.task.cancelling() - int(expired) > self.baseline:
            raise asyncio.CancelledError
        if expired or time.monotonic() >= self.deadline:
            raise TimeoutError


def _identities(metrics: tuple[Metric, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not 1 <= len(metrics) <= MAX_METRICS:
        raise ValueError(f"an evaluator needs 1..{MAX_METRICS} metrics")
    ids = tuple(_attribute(m, "id") for m in metrics)
    versions = tuple(_attribute(m, "version") for m in metrics)
    for metric_id, version, metric in zip(ids, versions, metrics, strict=True):
        check_id(metric_id)
        if not version.strip():
            raise ValueError(f"metric {metric_id}: version must be non-blank")
        if not all(
            callable(getattr(metric, name, None)) for name in ("state", "questions", "reduce")
        ):
            raise ValueError(f"metric {metric_id}: needs state, questions and reduce methods")
    if len(set(ids)) != len(ids):
        raise ValueError("metric ids must be unique (the same metric was configured twice?)")
    return ids, versions


def _attribute(metric: object, name: str) -> str:
    value = getattr(metric, name, None)
    if not isinstance(value, str):
        raise ValueError(f"every metric needs a string {name!r}")  # noqa: TRY004 - contract
    return value


def _request(group: _Group) -> JudgeRequest:
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


async def _ask_judge(judge: Judge, request: JudgeRequest, deadline: float) -> object:
    """Call the judge; return its reply or the exception it raised (``CancelledError`` escapes)."""
    try:
        with use_deadline(deadline):  # retrying judges never schedule a retry past it
            return await judge(request)
    except Exception as exc:  # noqa: BLE001 - every judge failure becomes a reason code
        return exc


def _classify(request: JudgeRequest, reply: object, *, trusted: bool) -> _Outcome:
    if isinstance(reply, InvalidReply):
        return _Outcome(Reason.INVALID_RESPONSE, _usage_of(reply.model, reply.usage))
    if isinstance(reply, Exception):
        _log.warning("judge request failed: %s (%s)", Reason.BACKEND_ERROR, type(reply).__name__)
        return _Outcome(Reason.BACKEND_ERROR)
    if not isinstance(reply, JudgeResponse):
        return _Outcome(Reason.INVALID_RESPONSE)
    # Usage first: an invalid response may still have been billed.
    usage = _usage_of(reply.model, reply.usage)
    if trusted:
        return _Outcome(None, usage, reply)
    try:
        validate_response(request, reply)
    except Exception as exc:  # noqa: BLE001 - any validation failure is INVALID_RESPONSE
        _log.warning(
            "judge response rejected: %s (%s)", Reason.INVALID_RESPONSE, type(exc).__name__
        )
        return _Outcome(Reason.INVALID_RESPONSE, usage)
    return _Outcome(None, usage, reply)


def _usage_of(model: object, usage: object) -> RequestUsage:
    values = {  # both fields are type-checked right here
        "model": model if isinstance(model, str) else None,
        "usage": usage if isinstance(usage, Usage) else None,
    }
    return assemble(RequestUsage, values, set(_USAGE_FIELDS))


def _log_failure(metric_id: str, reason: str, exc: Exception) -> None:
    # The exception *type* only: messages may quote evidence, keys or model output.
    _log.warning("metric %s: %s (%s)", metric_id, reason, type(exc).__name__)
