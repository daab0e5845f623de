"""The trace evaluator: budgeted execution of the planned requests (docs/semantics.md §6.2).

``Evaluator(judge, metrics, limits).evaluate(trace)`` has the :class:`~._packing.Planner` settle
and pack the metrics, then runs the packed judge requests one after another under a single
deadline. Whatever happens inside a metric or a judge becomes a reason code in the
:class:`~worker.evaluation.Report`; only the caller's own cancellation escapes. A caller that
cancels an evaluation itself (a backstop) passes a :class:`Progress` and gets what had finished
from :meth:`Evaluator.interrupted_report`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from worker._models import assemble
from worker.judges import (
    InvalidReply,
    JudgeRequest,
    JudgeResponse,
    Usage,
    check_async_judge,
    use_deadline,
    validate_response,
    validates_replies,
)

from . import _trace
from ._limits import Limits
from ._metric import check_id
from ._packing import Group, Member, Planner, build_request, log_failure
from ._report import Entry, Report, RequestUsage, Sent
from ._result import MetricResult, Reason

if TYPE_CHECKING:
    from collections.abc import Iterable

    from worker.judges import Judge

    from ._metric import Metric
    from ._trace import Trace

__all__ = ["MAX_METRICS", "Evaluator", "Progress"]

MAX_METRICS = 128

_log = logging.getLogger(__name__)
_TIMEOUT = MetricResult.error(Reason.TIMEOUT)  # frozen: one instance serves every report
_UNKNOWN_USAGE = RequestUsage(model=None, usage=None)  # a request sent with no reply


# Built with assemble() from checked parts (model_construct's per-field lookups cost ~3 us each,
# nine instances per evaluation): every field is set, as model_construct(**all fields) sets it.
_ENTRY_FIELDS = frozenset(Entry.model_fields)
_REPORT_FIELDS = frozenset(Report.model_fields)
_USAGE_FIELDS = frozenset(RequestUsage.model_fields)
_SENT_FIELDS = frozenset(Sent.model_fields)


@dataclass
class _Run:
    """Mutable bookkeeping of one ``evaluate`` call."""

    results: list[MetricResult | None]
    requests: int = 0
    awaiting: int = 0  # requests sent whose reply has not come back (one at most)
    usage: list[RequestUsage] = field(default_factory=list)
    asked: dict[int, tuple[str, ...]] = field(default_factory=dict)
    sent: dict[int, Sent] = field(default_factory=dict)


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
class _JudgeOutcome:
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
        self._planner = Planner(self._metrics, self._ids, limits)

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
        groups = self._planner.plan(trace, run.results, run.asked)
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

    # -- execution (docs/semantics.md §6.2) --------------------------------------------------------

    async def _execute(self, groups: list[Group], trace: Trace, deadline: float, run: _Run) -> None:
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

    async def _run_group(self, group: Group, trace: Trace, run: _Run, guard: _Guard) -> None:
        guard.check()  # never start a request with no time left, or after an outer cancel
        request = build_request(group)
        _record_sent(run, group, request, self._ids)
        run.requests += 1
        run.awaiting += 1  # stays counted if the call is cancelled: sent, and no reply came
        reply = await _ask_judge(self._judge, request, guard.deadline)
        outcome = _classify(request, reply, trusted=self._trusted)
        if outcome.usage is not None:
            run.usage.append(outcome.usage)  # once per response, never per member
            if outcome.usage.model:  # a blank name says nothing about who answered
                _record_model(run, group, outcome.usage.model)
        run.awaiting -= 1  # after the usage: a reader in between over-counts, never misses it
        guard.check()
        for member in group.members:
            run.results[member.index] = self._settle(member, outcome, trace)

    def _settle(self, member: Member, outcome: _JudgeOutcome, trace: Trace) -> MetricResult:
        if outcome.response is None:
            return MetricResult.error(outcome.reason or Reason.INVALID_RESPONSE)
        metric_id = self._ids[member.index]
        answers = {qid: outcome.response.answers[f"{metric_id}.{qid}"] for qid in member.qids}
        try:
            result = member.metric.reduce(MappingProxyType(answers), trace)
        except Exception as exc:  # noqa: BLE001 - isolation: only this metric fails
            log_failure(metric_id, Reason.REDUCE_ERROR, exc)
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
                    "sent": run.sent.get(index),
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


def _sent(questions: tuple[str, ...], state_sha256: str, model: str | None) -> Sent:
    values = {"questions": questions, "state_sha256": state_sha256, "model": model}
    return assemble(Sent, values, set(_SENT_FIELDS))  # every field is checked by its caller


def _record_sent(run: _Run, group: Group, request: JudgeRequest, ids: tuple[str, ...]) -> None:
    """Record, before the request leaves, what it carries for each member (the audit trail).

    The state's digest is over the very text the request serializes (computed once per request);
    each question's text is its wire JSON, serialized once per question object.
    """
    state_sha256 = hashlib.sha256(request.state_json().encode("utf-8")).hexdigest()
    questions = request.questions
    for member in group.members:
        metric_id = ids[member.index]
        texts = tuple(questions[f"{metric_id}.{qid}"].wire_json() for qid in member.qids)
        run.sent[member.index] = _sent(texts, state_sha256, None)


def _record_model(run: _Run, group: Group, model: str) -> None:
    """The model the reply named, on every member the request carried."""
    for member in group.members:
        sent = run.sent[member.index]
        run.sent[member.index] = _sent(sent.questions, sent.state_sha256, model)


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


async def _ask_judge(judge: Judge, request: JudgeRequest, deadline: float) -> object:
    """Call the judge; return its reply or the exception it raised (``CancelledError`` escapes)."""
    try:
        with use_deadline(deadline):  # retrying judges never schedule a retry past it
            return await judge(request)
    except Exception as exc:  # noqa: BLE001 - every judge failure becomes a reason code
        return exc


def _classify(request: JudgeRequest, reply: object, *, trusted: bool) -> _JudgeOutcome:
    if isinstance(reply, InvalidReply):
        return _JudgeOutcome(Reason.INVALID_RESPONSE, _usage_of(reply.model, reply.usage))
    if isinstance(reply, Exception):
        _log.warning("judge request failed: %s (%s)", Reason.BACKEND_ERROR, type(reply).__name__)
        return _JudgeOutcome(Reason.BACKEND_ERROR)
    if not isinstance(reply, JudgeResponse):
        return _JudgeOutcome(Reason.INVALID_RESPONSE)
    # Usage first: an invalid response may still have been billed.
    usage = _usage_of(reply.model, reply.usage)
    if trusted:
        return _JudgeOutcome(None, usage, reply)
    try:
        validate_response(request, reply)
    except Exception as exc:  # noqa: BLE001 - any validation failure is INVALID_RESPONSE
        _log.warning(
            "judge response rejected: %s (%s)", Reason.INVALID_RESPONSE, type(exc).__name__
        )
        return _JudgeOutcome(Reason.INVALID_RESPONSE, usage)
    return _JudgeOutcome(None, usage, reply)


def _usage_of(model: object, usage: object) -> RequestUsage:
    values = {  # both fields are type-checked right here
        "model": model if isinstance(model, str) else None,
        "usage": usage if isinstance(usage, Usage) else None,
    }
    return assemble(RequestUsage, values, set(_USAGE_FIELDS))
