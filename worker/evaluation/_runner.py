"""The dataset runner: evaluate many traces and score them against gold (docs/semantics.md §8).

``await run_dataset(evaluator, cases, concurrency)`` validates everything first, evaluates up to
``concurrency`` traces at once, and returns rows in input order plus per-metric and per-scenario
:class:`Summary` counts, nearest-rank latency percentiles and usage totals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    WrapSerializer,
    field_validator,
    model_validator,
)

from . import _trace
from ._evaluator import Evaluator
from ._report import Report
from ._result import Status

if TYPE_CHECKING:
    from ._trace import Trace

__all__ = [
    "MAX_CASES",
    "MAX_CONCURRENCY",
    "Case",
    "DatasetLatency",
    "DatasetReport",
    "DatasetRow",
    "DatasetUsage",
    "Expected",
    "Summary",
    "SummaryCounter",
    "run_dataset",
]

MAX_CASES = 10_000
MAX_CONCURRENCY = 32


def _readonly(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _dump_mapping(value: Mapping[str, Any], handler: SerializerFunctionWrapHandler) -> Any:
    return handler(dict(value))


_ReadOnly = (AfterValidator(_readonly), WrapSerializer(_dump_mapping))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Expected(_Frozen):
    """A gold label for one metric: exactly one of ``passed`` or ``label``."""

    passed: bool | None = None
    label: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Expected:
        if (self.passed is None) == (self.label is None):
            raise ValueError("Expected needs exactly one of passed or label")
        return self


def _check_trace(value: object) -> object:
    # Looked up at call time so the check follows the Trace class actually in use.
    if not isinstance(value, _trace.Trace):
        raise ValueError("trace must be a Trace")  # noqa: TRY004 - contract: ValueError
    return value


class Case(BaseModel):
    """One dataset item: a scenario name, a trace and gold labels keyed by metric id."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    scenario: str
    trace: Annotated[Any, AfterValidator(_check_trace)]
    expected: Annotated[Mapping[str, Expected], *_ReadOnly] = Field(
        default_factory=dict, validate_default=True
    )

    def __init__(
        self,
        scenario: str,
        trace: Trace,
        expected: Mapping[str, Expected] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(
            scenario=scenario, trace=trace, expected={} if expected is None else expected, **kw
        )

    @field_validator("scenario")
    @classmethod
    def _non_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("scenario must be non-blank")
        return value


class DatasetRow(_Frozen):
    """One evaluated case, in input order."""

    scenario: str
    trace_id: str
    expected: Annotated[Mapping[str, Expected], *_ReadOnly]
    report: Report


class Summary(_Frozen):
    """Counts for one metric over a set of rows; ``accuracy = correct / labelled`` (0 if none)."""

    total: int
    labelled: int
    correct: int
    incorrect: int
    inconclusive: int
    skipped: int
    errors: int
    unscored: int
    accuracy: float


class DatasetLatency(_Frozen):
    """Nearest-rank percentiles of the per-trace ``elapsed_s``, in milliseconds (0 if no rows)."""

    p50_ms: float
    p95_ms: float


class DatasetUsage(_Frozen):
    """Requests started and the token totals of the responses that reported usage.

    ``responses_with_usage < requests`` means the total cost is incomplete, not zero.
    """

    requests: int
    responses_with_usage: int
    input_tokens: int
    output_tokens: int


class DatasetReport(_Frozen):
    """Rows in input order, summaries per metric and per scenario (first-seen order), totals."""

    rows: tuple[DatasetRow, ...]
    metrics: Annotated[Mapping[str, Summary], *_ReadOnly]
    scenarios: Annotated[Mapping[str, Annotated[Mapping[str, Summary], *_ReadOnly]], *_ReadOnly]
    latency: DatasetLatency
    usage: DatasetUsage
    elapsed_s: float


async def run_dataset(
    evaluator: Evaluator, cases: Sequence[Case], concurrency: int
) -> DatasetReport:
    """Evaluate every case (at most ``concurrency`` at once) and summarize against the labels.

    Everything is validated before the first evaluation starts (``ValueError``):
    ``1 <= concurrency <= 32``, at most 10 000 cases, unique trace ids, and expected keys that
    are metric ids of ``evaluator``.
    """
    items = _validate(evaluator, cases, concurrency)
    started = time.monotonic()
    reports = await _evaluate_all(evaluator, items, concurrency)
    rows = tuple(
        DatasetRow(scenario=c.scenario, trace_id=c.trace.id, expected=c.expected, report=r)
        for c, r in zip(items, reports, strict=True)
    )
    return DatasetReport(
        rows=rows,
        metrics=_summaries(evaluator.metric_ids, rows),
        scenarios=_per_scenario(evaluator.metric_ids, rows),
        latency=_latency(rows),
        usage=_usage(rows),
        elapsed_s=time.monotonic() - started,
    )


def _validate(evaluator: Evaluator, cases: Sequence[Case], concurrency: int) -> tuple[Case, ...]:
    if not isinstance(evaluator, Evaluator):
        raise ValueError("evaluator must be an Evaluator")  # noqa: TRY004 - contract: ValueError
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        raise ValueError("concurrency must be an integer")  # noqa: TRY004 - contract: ValueError
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be within 1..{MAX_CONCURRENCY}")
    items = tuple(cases)
    if len(items) > MAX_CASES:
        raise ValueError(f"at most {MAX_CASES} cases per dataset")
    if not all(isinstance(c, Case) for c in items):
        raise ValueError("every case must be a Case")
    ids = [c.trace.id for c in items]
    if len(set(ids)) != len(ids):
        raise ValueError("trace ids must be unique across the cases")
    known = set(evaluator.metric_ids)
    if any(key not in known for c in items for key in c.expected):
        raise ValueError("expected keys must be metric ids of the evaluator")
    return items


async def _evaluate_all(
    evaluator: Evaluator, items: tuple[Case, ...], concurrency: int
) -> list[Report]:
    """A fixed pool of workers pulls the next index, so at most ``concurrency`` run at once."""
    reports: list[Report | None] = [None] * len(items)
    pending: Iterator[int] = iter(range(len(items)))

    async def worker() -> None:
        for index in pending:  # shared iterator: each index is taken by exactly one worker
            reports[index] = await evaluator.evaluate(items[index].trace)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(items))):
            group.create_task(worker())
    return [r for r in reports if r is not None]


@dataclass
class SummaryCounter:
    """Gold counting for one metric (semantics §8): feed it results, read a :class:`Summary`.

    ``wanted`` is the gold value (a label or a passed flag) or ``None`` for an unlabelled row;
    ``actual`` is the result's label or passed flag, whichever the gold value names.
    Shared by :func:`run_dataset` and the store-backed report, so both count identically.
    """

    total: int = 0
    labelled: int = 0
    correct: int = 0
    incorrect: int = 0
    inconclusive: int = 0
    skipped: int = 0
    errors: int = 0
    unscored: int = 0

    def count(self, status: str, actual: str | bool | None, wanted: str | bool | None) -> None:
        """Count one result: its status, its actual value and the gold value (None: unlabelled)."""
        self.total += 1
        self.labelled += int(wanted is not None)
        if status == Status.INCONCLUSIVE:
            self.inconclusive += 1
        elif status == Status.SKIPPED:
            self.skipped += 1
        elif status == Status.ERROR:
            self.errors += 1
        elif wanted is not None:
            self._score(actual, wanted)

    def add(self, row: DatasetRow, metric_id: str) -> None:
        """Count ``metric_id`` of one dataset row against its :class:`Expected`."""
        result = row.report.result(metric_id)
        expected = row.expected.get(metric_id)
        if expected is None:
            self.count(result.status, None, None)
        elif expected.label is not None:
            self.count(result.status, result.label, expected.label)
        else:
            self.count(result.status, result.passed, expected.passed)

    def _score(self, actual: str | bool | None, wanted: str | bool) -> None:
        if actual is None:
            self.unscored += 1
        elif actual == wanted:
            self.correct += 1
        else:
            self.incorrect += 1

    def summary(self) -> Summary:
        counts = {f.name: getattr(self, f.name) for f in fields(self)}
        accuracy = self.correct / self.labelled if self.labelled else 0.0
        return Summary(**counts, accuracy=accuracy)


def _summaries(metric_ids: tuple[str, ...], rows: Sequence[DatasetRow]) -> dict[str, Summary]:
    tallies = {metric_id: SummaryCounter() for metric_id in metric_ids}
    for row in rows:
        for entry in row.report.results:
            if entry.id in tallies:
                tallies[entry.id].add(row, entry.id)
    return {metric_id: tally.summary() for metric_id, tally in tallies.items()}


def _per_scenario(
    metric_ids: tuple[str, ...], rows: Sequence[DatasetRow]
) -> dict[str, dict[str, Summary]]:
    by_scenario: dict[str, list[DatasetRow]] = {}  # dicts keep first-seen order
    for row in rows:
        by_scenario.setdefault(row.scenario, []).append(row)
    return {name: _summaries(metric_ids, group) for name, group in by_scenario.items()}


def _nearest_rank(sorted_ms: Sequence[float], percent: int) -> float:
    """``sorted[ceil(p*n) - 1]`` with integer arithmetic (no float rounding at the boundaries)."""
    if not sorted_ms:
        return 0.0
    rank = -(-percent * len(sorted_ms) // 100)
    return sorted_ms[max(rank, 1) - 1]


def _latency(rows: Sequence[DatasetRow]) -> DatasetLatency:
    elapsed_ms = sorted(row.report.elapsed_s * 1000 for row in rows)
    return DatasetLatency(
        p50_ms=_nearest_rank(elapsed_ms, 50), p95_ms=_nearest_rank(elapsed_ms, 95)
    )


def _usage(rows: Sequence[DatasetRow]) -> DatasetUsage:
    known = [
        u.usage
        for row in rows
        for u in row.report.usage
        if u.usage is not None and u.usage.input_tokens >= 0 and u.usage.output_tokens >= 0
    ]
    return DatasetUsage(
        requests=sum(row.report.requests for row in rows),
        responses_with_usage=len(known),
        input_tokens=sum(u.input_tokens for u in known),
        output_tokens=sum(u.output_tokens for u in known),
    )
