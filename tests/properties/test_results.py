"""The engine's fast result and question paths equal the validated ones.

Built-in metrics build their results with :func:`scored` and their claim questions without
re-validating constant parts; both must give exactly what validation gives, and refuse what it
refuses, for any values.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from tests.properties.strategies import examples
from worker._models import assemble
from worker.canonical_json import compact_json
from worker.evaluation import Entry, MetricResult, Reason, Report, Sent, Status, Thresholds
from worker.evaluation import RequestUsage as EngineUsage
from worker.evaluation._metrics import _UNTRUSTED, _claim_question
from worker.evaluation._result import scored
from worker.judges import NoulQuestion, Usage

_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1),
    st.integers(min_value=-1, max_value=2),
    st.booleans(),
    st.none(),
)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text(max_size=4)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
_evidence = st.one_of(
    st.dictionaries(st.text(max_size=6), _json, max_size=4),
    st.dictionaries(st.integers(), st.floats(), max_size=2),
    st.none(),
    st.just([1.0]),
)


def _same_model(fast: BaseModel, validated: BaseModel) -> None:
    """Equal, dumped alike (types included), same field order, set fields and private state."""
    assert fast == validated
    assert fast.model_dump_json() == validated.model_dump_json()
    assert list(fast.__dict__) == list(validated.__dict__)
    assert fast.model_fields_set == validated.model_fields_set
    assert fast.__pydantic_private__ == validated.__pydantic_private__


@settings(max_examples=examples(400), deadline=None)
@given(
    status=st.sampled_from([*Status, "DECIDED"]),
    score=_number,
    passed=st.one_of(st.none(), st.booleans(), st.just(1)),
    label=st.one_of(st.none(), st.text(max_size=4), st.just(2)),
    reason=st.sampled_from(["DECIDED", "INCONCLUSIVE", "", " ", "X"]),
    evidence=_evidence,
)
def test_scored_results_equal_validated_results(
    status: Any, score: Any, passed: Any, label: Any, reason: str, evidence: Any
) -> None:
    """scored() builds the validated MetricResult, and refuses exactly what validation refuses."""
    fields = {
        "status": status,
        "score": score,
        "passed": passed,
        "label": label,
        "reason": reason,
        "evidence": evidence,
    }
    try:
        validated = MetricResult(**fields)
    except ValidationError:
        try:
            scored(status, score, passed, label, reason, evidence)
        except ValidationError:
            return
        raise AssertionError("scored() accepted what validation refuses") from None
    _same_model(scored(status, score, passed, label, reason, evidence), validated)


def _assessed(thresholds: Thresholds, score: float, evidence: Any) -> MetricResult:
    """What assess() built before scored(): the validated result."""
    ev = {} if evidence is None else evidence
    if score <= thresholds.fail_at_or_below or score >= thresholds.pass_at_or_above:
        passed = score >= thresholds.pass_at_or_above
        return MetricResult(
            status=Status.DECIDED, score=score, passed=passed, reason=Reason.DECIDED, evidence=ev
        )
    return MetricResult(
        status=Status.INCONCLUSIVE, score=score, reason=Reason.INCONCLUSIVE, evidence=ev
    )


@settings(max_examples=examples(300), deadline=None)
@given(
    pair=st.tuples(st.floats(0, 1), st.floats(0, 1)).filter(lambda p: p[0] < p[1]),
    score=st.one_of(st.floats(allow_nan=False), st.floats(0, 1), st.integers(0, 1)),
    evidence=_evidence,
)
def test_assess_equals_validated_assessment(
    pair: tuple[float, float], score: float, evidence: Any
) -> None:
    """Thresholds.assess gives the validated result (or refuses it) for any score and evidence."""
    thresholds = Thresholds(*pair)
    try:
        validated = _assessed(thresholds, score, evidence)
    except ValidationError:
        try:
            thresholds.assess(score, evidence)
        except ValidationError:
            return
        raise AssertionError("assess() accepted what validation refuses") from None
    assert thresholds.assess(score, evidence) == validated
    assert thresholds.assess(score, evidence).model_dump_json() == validated.model_dump_json()


def _validated_claim_question(index: int, claim: str) -> NoulQuestion:
    """The claim question as it was built before: validated, claim quoted by json.dumps."""
    quoted = json.dumps(claim, ensure_ascii=False)
    return NoulQuestion(
        instructions=f"Is state.claims[{index}] ({quoted}) fully supported by state.evidence? "
        "Answer yes only if every fact, number, date and commitment in the claim is stated in "
        "or follows directly from the evidence; a claim that adds anything the evidence does "
        "not contain is not supported. " + _UNTRUSTED,
        criteria={
            "true": "The evidence fully supports the claim.",
            "false": "The claim is unsupported, contradicted, or adds facts.",
        },
    )


@settings(max_examples=examples(200), deadline=None)
@given(index=st.integers(min_value=0, max_value=10_000), claim=st.text(max_size=40))
def test_claim_questions_equal_validated_questions(index: int, claim: str) -> None:
    """Each claim question equals the validated one, and prints the same wire JSON."""
    fast, validated = _claim_question(index, claim), _validated_claim_question(index, claim)
    _same_model(fast, validated)
    assert fast.wire_json() == validated.wire_json()


_CONTENT = st.one_of(
    st.text(min_size=1, max_size=20).filter(str.strip),
    st.dictionaries(st.text(max_size=4), st.one_of(st.text(max_size=5), st.integers()), min_size=1),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    instructions=_CONTENT,
    criteria=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["true", "false"]), st.one_of(st.none(), _CONTENT), min_size=1
        ),
    ),
)
def test_noul_question_wire_text_equals_its_dump(instructions: Any, criteria: Any) -> None:
    """A noul question written from its fields prints what pydantic's dump printed."""
    try:
        question = NoulQuestion.model_validate({"instructions": instructions, "criteria": criteria})
    except ValidationError:
        return
    dumped = question.model_dump(mode="json", exclude_none=True)
    assert question.wire_json() == compact_json(dumped)


def test_claim_questions_cache_their_wire_text_each() -> None:
    """A claim question's cached wire text is its own: printing one does not fill another's."""
    first, second = _claim_question(0, "a"), _claim_question(1, "b")
    first.wire_json()
    assert second.__pydantic_private__ == {"_wire_text": None}
    assert json.loads(second.wire_json())["instructions"].startswith("Is state.claims[1]")


def _engine_models() -> list[tuple[type[BaseModel], dict[str, Any]]]:
    result = MetricResult.skipped(Reason.NO_CLAIMS)
    entry = Entry(id="grounded", version="1", result=result, asked=("c0",))
    usage = EngineUsage(model="m", usage=Usage(input_tokens=1, output_tokens=2))
    sent = Sent(questions=('{"type":"noul"}',), state_sha256="ab" * 32, model="m")
    report = {
        "trace_id": "t",
        "results": (entry,),
        "requests": 1,
        "usage": (usage,),
        "elapsed_s": 0.5,
    }
    return [
        (
            Entry,
            {"id": "grounded", "version": "1", "result": result, "asked": ("c0",), "sent": None},
        ),
        (
            Entry,
            {"id": "grounded", "version": "1", "result": result, "asked": ("c0",), "sent": sent},
        ),
        (Sent, {"questions": ('{"type":"noul"}',), "state_sha256": "ab" * 32, "model": None}),
        (EngineUsage, {"model": "m", "usage": usage.usage}),
        (Report, report),
    ]


@pytest.mark.parametrize(("model", "values"), _engine_models())
def test_assembled_engine_models_match_model_construct(
    model: type[BaseModel], values: dict[str, Any]
) -> None:
    """The evaluator's assembled Entry, usage and Report hold what model_construct would set."""
    built = assemble(model, dict(values), set(model.model_fields))
    constructed = model.model_construct(**values)
    slots = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
    for slot in slots:
        assert getattr(built, slot) == getattr(constructed, slot)
    assert built == model.model_validate(values)
