"""The worker's fast record paths equal the validated ones.

The task builds each :class:`MetricResultRecord` without re-validating what the engine already
validated, and the store prints question ids from cached string texts; both must give exactly
what validation and :func:`canonical_json` would, for any result the engine can produce.
"""

from __future__ import annotations

import asyncio
from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties.strategies import examples
from tests.queue.queue_kit import example_snapshots
from worker import tasks
from worker._json import canonical_json
from worker.evaluation import (
    Entry,
    Evaluator,
    Limits,
    MetricResult,
    Report,
    Status,
    Thresholds,
    Trace,
)
from worker.judges import SyntheticJudge
from worker.metric_sets import MetricSet, build_metric_set
from worker.store import MetricResultRecord
from worker.store._writes import _string_list_json

_finite = st.floats(min_value=0, max_value=1, allow_nan=False)
_evidence = st.dictionaries(
    st.text(max_size=8),
    st.one_of(
        st.none(), st.booleans(), _finite, st.text(max_size=8), st.lists(_finite, max_size=3)
    ),
    max_size=4,
)


@st.composite
def _results(draw: st.DrawFn) -> MetricResult:
    status = draw(st.sampled_from(list(Status)))
    passed = draw(st.none() | st.booleans()) if status is Status.DECIDED else None
    return MetricResult(
        status=status,
        score=draw(st.none() | _finite),
        passed=passed,
        label=draw(st.none() | st.text(max_size=8)),
        reason=draw(st.sampled_from(["DECIDED", "TIMEOUT", "NO_CLAIMS", "INVALID_RESPONSE"])),
        evidence=draw(_evidence),
    )


@cache
def _planned() -> tuple[MetricSet, Trace, Report]:
    """The agent set, the example order trace and its (synthetic) report."""
    metric_set = build_metric_set(
        "agent", thresholds=Thresholds(0.2, 0.8), judge="synthetic", limits=Limits()
    )
    trace = example_snapshots()["order-42"].trace()
    evaluator = Evaluator(SyntheticJudge(), metric_set.metrics)
    return metric_set, trace, asyncio.run(evaluator.evaluate(trace))


@settings(max_examples=examples(60), deadline=None)
@given(results=st.lists(_results(), min_size=7, max_size=7), model=st.none() | st.text(max_size=8))
def test_records_built_without_validation_equal_validated_records(
    results: list[MetricResult], model: str | None
) -> None:
    """Every MetricResultRecord the task builds equals the record validation would build."""
    metric_set, trace, planned = _planned()
    entries = tuple(
        Entry(id=e.id, version=e.version, result=r, asked=e.asked)
        for e, r in zip(planned.results, results, strict=True)
    )
    report = planned.model_copy(update={"results": entries})
    built = tasks._results(report, metric_set, trace, model)
    assert len(built) == len(entries)
    for entry, record in zip(entries, built, strict=True):
        result = entry.result
        validated = MetricResultRecord(
            metric_id=entry.id,
            metric_version=entry.version,
            status=result.status,
            reason=result.reason,
            score=result.score,
            passed=result.passed,
            label=result.label,
            evidence=result.evidence,
            judge_model=record.judge_model,  # chosen by the task: answered metrics only
            question_ids=record.question_ids,
        )
        assert record == validated
        fields: dict[str, Any] = record.model_dump()
        assert MetricResultRecord.model_validate(fields) == record


@settings(max_examples=examples(200), deadline=None)
@given(ids=st.lists(st.text(), max_size=6).map(tuple))
def test_question_id_lists_print_as_canonical_json(ids: tuple[str, ...]) -> None:
    """The store's question-id text is exactly canonical_json of the tuple."""
    assert _string_list_json(ids) == canonical_json(ids)
