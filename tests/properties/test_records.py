"""The worker's fast record paths equal the validated ones.

The task builds each :class:`MetricResultRecord` without re-validating what the engine already
validated, and the store prints question ids from cached string texts; both must give exactly
what validation and :func:`canonical_json` would, for any result the engine can produce.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from tests.properties.strategies import examples
from tests.queue.queue_kit import example_snapshots
from worker import handling
from worker._models import assemble
from worker.canonical_json import canonical_json, freeze
from worker.evaluation import (
    Entry,
    Evaluator,
    Limits,
    MetricResult,
    Report,
    RequestUsage,
    Status,
    Thresholds,
    Trace,
)
from worker.judges import SyntheticJudge, Usage
from worker.metric_sets import MetricSet, build_metric_set
from worker.store import (
    AskedQuestion,
    EvaluationRecord,
    MetricResultRecord,
    ResultAudit,
    UsageRecord,
    text_sha256,
)
from worker.store._writes import _evaluation_params, _Facts, _result_rows, _string_list_json

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


_AGENT_SIZE = 8  # the agent set: the seven agent metrics and tool_execution


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
@given(
    results=st.lists(_results(), min_size=_AGENT_SIZE, max_size=_AGENT_SIZE),
    model=st.none() | st.text(max_size=8),
)
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
    built = handling._results(report, metric_set, trace, model)
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


# --- the evaluation record, its usage and its rows -------------------------------------------

_ID = "ab" * 32
_text = st.one_of(st.text(max_size=6), st.sampled_from(["", " ", "\t", "x", "agent", "É"]))
_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-2, max_value=2),
    st.booleans(),
    st.none(),
)


@st.composite
def _result_records(draw: st.DrawFn) -> MetricResultRecord:
    """A valid result record (most often from an engine result, as the task builds them)."""
    result = draw(_results())
    return MetricResultRecord(
        metric_id=draw(st.sampled_from(["a", "b", "c", "grounded"])),
        metric_version=draw(st.sampled_from(["1", "a@0.2-0.8"])),
        status=result.status.value,
        reason=result.reason,
        score=result.score,
        passed=result.passed,
        label=result.label,
        evidence=result.evidence,
        judge_model=draw(st.none() | st.text(max_size=4)),
        question_ids=tuple(draw(st.lists(st.text(max_size=4), max_size=3))),
        audit=draw(st.none() | _audits()),
    )


@st.composite
def _audits(draw: st.DrawFn) -> ResultAudit:
    """Valid audits: any id and text (escapes, non-ASCII), a model or none."""
    ids = draw(st.lists(st.text(min_size=1, max_size=4).filter(str.strip), max_size=3, unique=True))
    model = draw(st.none() | st.text(max_size=6))
    return ResultAudit(
        questions=tuple(AskedQuestion.of(i, draw(st.text(max_size=8))) for i in ids),
        state_sha256=draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
        judge_model=model,
        judge_model_reported=model is not None and draw(st.booleans()),
    )


_usage_json = st.dictionaries(
    st.text(max_size=6), st.one_of(st.integers(), st.booleans(), st.none(), _finite), max_size=3
)
_request_usage = st.builds(
    UsageRecord, model=st.none() | st.text(max_size=6), usage=st.none() | _usage_json
)


def _sequence(items: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly tuples (what the task passes), sometimes lists (which validation converts)."""
    return st.one_of(st.lists(items, max_size=4).map(tuple), st.lists(items, max_size=2))


_OMIT = object()  # a changed field that is left out instead (its default applies)


@st.composite
def _mostly_valid(
    draw: st.DrawFn,
    valid: dict[str, st.SearchStrategy[Any]],
    changed: dict[str, st.SearchStrategy[Any]],
) -> dict[str, Any]:
    """Valid fields with up to three of them changed (to odd, invalid or omitted values).

    Mostly valid on purpose: a draw with every field random almost never reaches the fast path.
    """
    fields = {name: draw(values) for name, values in valid.items()}
    for name in draw(st.sets(st.sampled_from(sorted(changed)), max_size=3)):
        value = draw(changed[name])
        if value is _OMIT:
            fields.pop(name, None)
        else:
            fields[name] = value
    return fields


_VALID_EVALUATION = {
    "snapshot_id": st.just(_ID),
    "metric_set": st.sampled_from(["agent", "agent+trajectory"]),
    "metric_set_version": st.sampled_from(["agent@0123", "x"]),
    "run": st.sampled_from(["", "rerun-1"]),
    "judge_kind": st.sampled_from(["synthetic", "systemone", "chat"]),
    "judge_model": st.none() | st.text(max_size=4),
    "synthetic": st.just(True),
    "requests": st.integers(min_value=0, max_value=3),
    "usage": st.lists(_request_usage, max_size=3).map(tuple),
    "elapsed_s": st.floats(min_value=0, max_value=1e6),
    "lane": st.sampled_from(["live", "backfill"]),
    "results": st.lists(_result_records(), max_size=4, unique_by=lambda r: r.metric_id).map(tuple),
    "outcome_criteria": st.lists(st.sampled_from(["b", "a", "refund"]), unique=True).map(tuple),
}
_CHANGED_EVALUATION = {
    "snapshot_id": st.sampled_from([_ID.upper(), _ID + "\n", _ID[:-1], "x", 1]),
    "metric_set": _text,
    "metric_set_version": _text,
    "run": st.one_of(st.none(), st.just(_OMIT)),
    "judge_kind": st.sampled_from([" ", ""]),
    "judge_model": st.one_of(st.just(_OMIT), st.just(1)),
    "synthetic": st.sampled_from([False, 0, 1, "yes"]),
    "requests": st.one_of(st.just(-1), _number),
    "usage": st.one_of(_sequence(_request_usage), st.just(_OMIT), st.just(({"model": "m"},))),
    "elapsed_s": _number,
    "lane": st.sampled_from(["", " ", 1]),
    "results": _sequence(_result_records()),
    "outcome_criteria": st.one_of(
        _sequence(st.sampled_from(["b", "a", " ", ""])), st.just(_OMIT), st.just(("a", 1))
    ),
    "unknown": st.just(1),
}


def _evaluation_fields() -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for EvaluationRecord: valid ones with a few changed."""
    return _mostly_valid(_VALID_EVALUATION, _CHANGED_EVALUATION)


def _same_record(fast: BaseModel, validated: BaseModel) -> None:
    """Equal, dumped alike (types included), same field order and same explicitly set fields."""
    assert fast == validated
    assert fast.model_dump_json() == validated.model_dump_json()
    assert list(fast.__dict__) == list(validated.__dict__)
    assert fast.model_fields_set == validated.model_fields_set


def _built(build: Callable[[], BaseModel]) -> BaseModel | type[ValidationError]:
    try:
        return build()
    except ValidationError:
        return ValidationError


def _same_or_both_refused(
    kind: type[BaseModel], validate: Callable[[], BaseModel], fast: Callable[[], BaseModel]
) -> None:
    """The fast path builds what validation builds, or both refuse the input."""
    validated, built = _built(validate), _built(fast)
    if validated is ValidationError or built is ValidationError:
        assert built is validated
        return
    assert isinstance(built, kind)
    assert isinstance(validated, kind)
    _same_record(built, validated)


@settings(max_examples=examples(300), deadline=None)
@given(fields=_evaluation_fields())
def test_checked_evaluation_records_equal_validated_records(fields: dict[str, Any]) -> None:
    """EvaluationRecord.checked builds the validated record, and refuses what validation refuses."""
    _same_or_both_refused(
        EvaluationRecord,
        lambda: EvaluationRecord(**fields),
        lambda: EvaluationRecord.checked(**fields),
    )


def _valid_evaluation(**changes: Any) -> dict[str, Any]:
    result = MetricResultRecord(metric_id="a", metric_version="1", status="DECIDED", reason="X")
    fields: dict[str, Any] = {
        "snapshot_id": _ID,
        "metric_set": "agent",
        "metric_set_version": "agent@1",
        "judge_kind": "synthetic",
        "synthetic": True,
        "requests": 1,
        "elapsed_s": 0.5,
        "lane": "live",
        "results": (result,),
        "outcome_criteria": ("b", "a"),
    }
    return {**fields, **changes}


_DUPLICATE = MetricResultRecord(metric_id="a", metric_version="2", status="SKIPPED", reason="X")


@pytest.mark.parametrize(
    "changes",
    [
        {"snapshot_id": _ID + "\n"},
        {"snapshot_id": _ID.upper()},
        {"metric_set": " "},
        {"lane": ""},
        {"synthetic": False},
        {"requests": -1},
        {"elapsed_s": math.nan},
        {"elapsed_s": -0.5},
        {"outcome_criteria": ("a", "a")},
        {"outcome_criteria": (" ",)},
        {
            "results": (
                MetricResultRecord(metric_id="a", metric_version="1", status="DECIDED", reason="X"),
                _DUPLICATE,
            )
        },
        {"usage": ("x",)},
        {"unknown": 1},
    ],
)
def test_checked_evaluation_records_refuse_invalid_fields(changes: dict[str, Any]) -> None:
    """Each rule of EvaluationRecord still refuses its invalid value through checked()."""
    with pytest.raises(ValidationError):
        EvaluationRecord.checked(**_valid_evaluation(**changes))


def test_checked_evaluation_records_sort_criteria() -> None:
    """The fast record keeps outcome criteria sorted, as the validator does."""
    assert EvaluationRecord.checked(**_valid_evaluation()).outcome_criteria == ("a", "b")


@settings(max_examples=examples(200), deadline=None)
@given(
    model=st.one_of(st.none(), st.text(max_size=6), st.integers()),
    usage=st.one_of(
        st.none(),
        _usage_json,
        st.dictionaries(st.integers(), st.integers(), max_size=2),
        st.just({"a": math.nan}),
        st.just([1]),
    ),
)
def test_counted_usage_equals_validated_usage(model: Any, usage: Any) -> None:
    """UsageRecord.counted builds the validated record, and refuses what validation refuses."""
    _same_or_both_refused(
        UsageRecord,
        lambda: UsageRecord(model=model, usage=usage),
        lambda: UsageRecord.counted(model, usage),
    )


@settings(max_examples=examples(100), deadline=None)
@given(
    model=st.none() | st.text(max_size=6),
    counts=st.none() | st.tuples(st.integers(), st.integers()),
)
def test_task_usage_records_equal_dumped_usage(
    model: str | None, counts: tuple[int, int] | None
) -> None:
    """The task's usage record equals the record built from the usage's JSON dump."""
    usage = None if counts is None else Usage(input_tokens=counts[0], output_tokens=counts[1])
    entry = RequestUsage(model=model, usage=usage)
    dumped = None if usage is None else usage.model_dump(mode="json")
    _same_record(handling._usage_record(entry), UsageRecord(model=model, usage=dumped))


_VALID_RESULT = {
    "metric_id": st.sampled_from(["a", "tool_choice"]),
    "metric_version": st.sampled_from(["1", "a@0.2-0.8"]),
    "status": st.sampled_from(["DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR"]),
    "reason": st.sampled_from(["DECIDED", "TIMEOUT"]),
    "score": st.none() | _finite,
    "passed": st.none(),
    "label": st.none() | st.text(max_size=4),
    "evidence": _evidence.map(freeze),
    "judge_model": st.none() | st.text(max_size=4),
    "question_ids": st.lists(st.text(max_size=3), max_size=3).map(tuple),
}
_CHANGED_RESULT = {
    "metric_id": _text,
    "metric_version": _text,
    "status": st.sampled_from(["decided", "", Status.ERROR, Status.DECIDED]),
    "reason": _text,
    "score": _number,
    "passed": st.sampled_from([True, False, 1, 0]),
    "label": st.sampled_from([3, ""]),
    "evidence": st.one_of(_evidence, st.none(), st.just(freeze([1])), st.just({"a": math.nan})),
    "judge_model": st.sampled_from([1, ""]),
    "question_ids": st.one_of(_sequence(st.text(max_size=3)), st.just((1,))),
}


@settings(max_examples=examples(300), deadline=None)
@given(fields=_mostly_valid(_VALID_RESULT, _CHANGED_RESULT))
def test_checked_result_records_equal_validated_records(fields: dict[str, Any]) -> None:
    """MetricResultRecord.checked builds the validated record, and refuses what it refuses."""
    _same_or_both_refused(
        MetricResultRecord,
        lambda: MetricResultRecord(**fields),
        lambda: MetricResultRecord.checked(**fields),
    )


def test_assembled_records_match_model_construct() -> None:
    """assemble sets exactly the instance state pydantic's model_construct sets."""
    values = {"model": "m", "usage": freeze({"a": 1})}
    built = assemble(UsageRecord, dict(values), {"model", "usage"})
    constructed = UsageRecord.model_construct(**values)
    for slot in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    ):
        assert getattr(built, slot) == getattr(constructed, slot)


# The rows as the store built them before plain attribute reads (the reference).
_OLD_EVALUATION_FIELDS = {
    *("snapshot_id", "metric_set", "metric_set_version", "run", "judge_kind", "judge_model"),
    *("synthetic", "requests", "elapsed_s", "lane"),
}
_OLD_RESULT_COLUMNS = ("metric_id", "metric_version", "reason", "score", "passed", "label")


_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _old_evaluation_params(record: EvaluationRecord, facts: _Facts) -> dict[str, Any]:
    return {
        **record.model_dump(include=_OLD_EVALUATION_FIELDS),
        "window_rule": facts.window_rule,
        "cutoff_event_id": facts.cutoff_event_id,
        "cutoff_time": facts.cutoff_time,
        "evaluation_id": record.evaluation_id,
        "trace_id": facts.trace_id,
        "usage": canonical_json([u.model_dump(mode="json") for u in record.usage]),
        "previous_evaluation_id": "e-0",
        "now": _NOW,
    }


def _old_result_rows(record: EvaluationRecord, facts: _Facts) -> list[dict[str, Any]]:
    return [
        {
            **{column: getattr(result, column) for column in _OLD_RESULT_COLUMNS},
            "judge_model": result.judge_model,
            "window_rule": facts.window_rule,
            "cutoff_event_id": facts.cutoff_event_id,
            "cutoff_time": facts.cutoff_time,
            "evaluation_id": record.evaluation_id,
            "position": position,
            "status": str(result.status),
            "evidence": canonical_json(result.evidence),
            "question_ids": canonical_json(result.question_ids),
            "audit": _old_audit_json(result.audit),
        }
        for position, result in enumerate(record.results)
    ]


def _old_audit_json(audit: ResultAudit | None) -> str | None:
    """The audit column from the model's dump (what ``audit_json`` writes from its fields)."""
    if audit is None:
        return None
    fields = audit.model_dump(exclude={"questions"})
    return canonical_json(
        {**fields, "questions": [[q.question_id, q.sha256] for q in audit.questions]}
    )


@st.composite
def _evaluation_records(draw: st.DrawFn) -> EvaluationRecord:
    """Valid evaluation records, validated."""
    results = draw(st.lists(_result_records(), max_size=4, unique_by=lambda r: r.metric_id))
    return EvaluationRecord(
        snapshot_id=_ID,
        metric_set=draw(st.sampled_from(["agent", "agent+trajectory"])),
        metric_set_version=draw(st.text(min_size=1, max_size=6).filter(str.strip)),
        run=draw(st.text(max_size=4)),
        judge_kind=draw(st.sampled_from(["systemone", "chat"])),
        judge_model=draw(st.none() | st.text(max_size=6)),
        synthetic=draw(st.booleans()),
        requests=draw(st.integers(min_value=0, max_value=5)),
        usage=tuple(draw(st.lists(_request_usage, max_size=3))),
        elapsed_s=draw(st.floats(min_value=0, max_value=1e9)),
        lane="live",
        results=tuple(results),
    )


@settings(max_examples=examples(200), deadline=None)
@given(record=_evaluation_records(), cutoff=st.none() | st.datetimes(timezones=st.just(UTC)))
def test_rows_equal_rows_built_from_dumps(
    record: EvaluationRecord, cutoff: datetime | None
) -> None:
    """The store's evaluation and result rows equal the rows built from model dumps."""
    facts = _Facts("trace-1", None, "after_event", "e-1", cutoff)
    assert _evaluation_params(record, facts, "e-0", _NOW) == _old_evaluation_params(record, facts)
    assert _result_rows(record, facts) == _old_result_rows(record, facts)


_VALID_AUDIT = {
    "questions": st.lists(
        st.builds(AskedQuestion.of, st.sampled_from(["m.q", "m.c0", "m.c1"]), st.text(max_size=8)),
        max_size=3,
        unique_by=lambda q: q.question_id,
    ).map(tuple),
    "state_sha256": st.just("ab" * 32),
    "judge_model": st.sampled_from(["jev-latest", "synthetic"]),
    "judge_model_reported": st.booleans(),
}
_CHANGED_AUDIT = {
    "questions": st.one_of(
        st.just((AskedQuestion.of("m.q", "a"), AskedQuestion.of("m.q", "b"))),  # duplicate id
        st.just([AskedQuestion.of("m.q", "a")]),  # a list, not a tuple
    ),
    "state_sha256": st.sampled_from(["AB" * 32, "ab" * 31, "", 1]),
    "judge_model": st.sampled_from([None, "", 1]),
    "judge_model_reported": st.sampled_from([0, 1, "yes", None]),
}


@settings(max_examples=examples(300), deadline=None)
@given(fields=_mostly_valid(_VALID_AUDIT, _CHANGED_AUDIT))
def test_checked_audits_equal_validated_audits(fields: dict[str, Any]) -> None:
    """ResultAudit.checked builds the validated audit, and refuses what validation refuses."""
    complete = {"judge_model": None, "judge_model_reported": False, **fields}
    _same_or_both_refused(
        ResultAudit, lambda: ResultAudit(**complete), lambda: ResultAudit.checked(**complete)
    )


@settings(max_examples=examples(200), deadline=None)
@given(question_id=st.sampled_from(["m.q", " ", ""]), text=st.text(max_size=12))
def test_asked_questions_equal_validated_ones(question_id: str, text: str) -> None:
    """AskedQuestion.of builds what validation builds from the text's own digest."""
    _same_or_both_refused(
        AskedQuestion,
        lambda: AskedQuestion(question_id=question_id, sha256=text_sha256(text), text=text),
        lambda: AskedQuestion.of(question_id, text),
    )
