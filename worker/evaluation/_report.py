"""What an evaluation returns: the :class:`Report`, its :class:`Entry` per metric, the usage of
each judge request (docs/semantics.md §6.3)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worker.judges import Usage

from ._result import MetricResult, Status

__all__ = ["Entry", "Report", "RequestUsage", "Sent"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RequestUsage(_Frozen):
    """Usage of one judge request: the answering model and its usage, ``None`` where unknown.

    One entry per response received (``usage=None``: the judge did not say), and, in an
    :meth:`~worker.evaluation.Evaluator.interrupted_report` only, ``model=None, usage=None`` for a
    request that was still waiting for its response when the caller stopped the evaluation.
    """

    model: str | None
    usage: Usage | None


class Sent(_Frozen):
    """What one metric's judge request carried, for auditing a record without trusting versions.

    ``questions`` are the exact wire texts of the metric's questions (each question's compact JSON
    as :meth:`~worker.judges.NoulQuestion.wire_json` writes it into the request), in the order of
    ``Entry.asked``. ``state_sha256`` is the sha256 hex of the UTF-8 text of the request's state
    (:meth:`~worker.judges.JudgeRequest.state_json`, the bytes a System One body carries; metrics
    packed into one request share it). ``model`` is the model the judge's reply said answered
    (``JudgeResponse.model``, or what an invalid reply still named); None when no reply came or it
    named none.
    """

    questions: tuple[str, ...]
    state_sha256: str
    model: str | None = None


class Entry(_Frozen):
    """One configured metric's result, tagged with the metric's id and version."""

    id: str
    version: str
    result: MetricResult
    asked: tuple[str, ...] = ()
    """The metric's local question ids planned for the judge (empty if it needed none)."""
    sent: Sent | None = None
    """What the judge was sent for this metric (None: no request carried its questions)."""


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
