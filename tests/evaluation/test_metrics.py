"""The seven built-in agent metrics (docs/semantics.md §3-§5)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.evaluation.order42 import ANSWER, REQUEST, order42_trace
from worker.evaluation import (
    Metric,
    MetricResult,
    Status,
    Thresholds,
    Trace,
    agent_metrics,
    canonical_json,
    check_id,
    thaw,
)
from worker.evaluation._metrics import (
    AnswerRelevancy,
    Completeness,
    Grounded,
    IndirectInjection,
    StayedInScope,
    ToolChoice,
    UsedToolResult,
)
from worker.judges import (
    ChoiceAnswer,
    ChoiceQuestion,
    NoulAnswer,
    NoulQuestion,
    ScoreAnswer,
    ScoreQuestion,
)

T = Thresholds(0.2, 0.8)
IDS = [
    "tool_choice",
    "used_tool_result",
    "grounded",
    "stayed_in_scope",
    "answer_relevancy",
    "completeness",
    "indirect_injection",
]
REQUIRED = {
    "tool_choice": ("request", "available_tools", "tool_calls", "final_answer"),
    "used_tool_result": ("request", "final_answer", "tool_results"),
    "grounded": ("final_answer",),
    "stayed_in_scope": ("request", "final_answer", "tool_calls"),
    "answer_relevancy": ("request", "final_answer"),
    "completeness": ("request", "final_answer"),
    "indirect_injection": ("tool_results",),
}
TOOL_RESULTS = [{"id": "c1", "name": "lookup_order", "arguments": {}, "result": "Shipped."}]


def noul(p: float) -> NoulAnswer:
    return NoulAnswer(noul=p)


def choice(label: str, confidence: float, p_correct: float) -> ChoiceAnswer:
    rest = (1.0 - p_correct) / 3
    probabilities = dict.fromkeys(("correct", "unnecessary", "missing", "wrong_tool"), rest)
    probabilities["correct"] = p_correct
    return ChoiceAnswer(choice=label, probabilities=probabilities, confidence=confidence)


def score(level: float) -> ScoreAnswer:
    legend = {str(i): f"level {i}" for i in range(4)}
    probabilities = {str(i): 0.25 for i in range(4)}
    return ScoreAnswer(score=level, legend=legend, probabilities=probabilities, confidence=0.5)


def fields_trace(**fields: Any) -> Trace:
    return Trace.from_fields("t", fields)


def by_id(metric_id: str) -> Any:
    return next(m for m in agent_metrics(T) if m.id == metric_id)


# --- shared rules ------------------------------------------------------------------------


def test_agent_metrics_are_the_seven_in_contract_order() -> None:
    """agent_metrics returns exactly the seven ids, in contract order, all valid metric ids."""
    metrics = agent_metrics(T)
    assert [m.id for m in metrics] == IDS
    assert all(check_id(m.id) == m.id for m in metrics)


def test_agent_metrics_satisfy_the_metric_protocol() -> None:
    """Every built-in is a plain class satisfying the Metric protocol."""
    assert all(isinstance(m, Metric) for m in agent_metrics(T))


def test_version_names_the_adaptation_and_thresholds() -> None:
    """Versions are "jevals-e9fb26a-as1-" + the thresholds tag, and change with thresholds."""
    assert {m.version for m in agent_metrics(T)} == {"jevals-e9fb26a-as1-0.2-0.8"}
    other = agent_metrics(Thresholds(0.3, 0.9))
    assert {m.version for m in other} == {"jevals-e9fb26a-as1-0.3-0.9"}


@pytest.mark.parametrize("bad", [None, (0.2, 0.8), 0.5])
def test_agent_metrics_require_thresholds(bad: Any) -> None:
    """There are no default thresholds: anything but a Thresholds is a ValueError."""
    with pytest.raises(ValueError, match="Thresholds"):
        agent_metrics(bad)


def test_order42_passes_every_precheck() -> None:
    """On the complete example no metric is skipped before asking the judge."""
    trace = order42_trace()
    assert [m.precheck(trace) for m in agent_metrics(T)] == [None] * 7


@pytest.mark.parametrize(
    ("metric_id", "missing"), [(m, f) for m, fields in REQUIRED.items() for f in fields]
)
def test_missing_required_field_skips(metric_id: str, missing: str) -> None:
    """Each required field must satisfy has(), else SKIPPED MISSING_FIELDS."""
    trace = order42_trace().with_field(missing, None)
    assert by_id(metric_id).precheck(trace) == MetricResult.skipped("MISSING_FIELDS")


@pytest.mark.parametrize("metric_id", ["tool_choice", "stayed_in_scope", "completeness"])
def test_blank_text_field_counts_as_missing(metric_id: str) -> None:
    """A blank request or answer is missing (has() is false for blank strings)."""
    trace = order42_trace().with_field("final_answer", "   ")
    assert by_id(metric_id).precheck(trace) == MetricResult.skipped("MISSING_FIELDS")


@pytest.mark.parametrize(
    "metric_id",
    ["tool_choice", "used_tool_result", "stayed_in_scope", "answer_relevancy", "completeness"],
)
def test_state_is_the_required_fields_untouched(metric_id: str) -> None:
    """Base state maps each required field to the trace value, never truncated."""
    long_answer = "Order 42 shipped yesterday. " * 500
    trace = order42_trace().with_field("final_answer", long_answer)
    state = thaw(by_id(metric_id).state(trace))
    assert set(state) == set(REQUIRED[metric_id])
    assert state == {k: thaw(trace.fields[k]) for k in REQUIRED[metric_id]}
    assert state["final_answer"] == long_answer


def test_seven_metrics_share_state_values_so_they_pack() -> None:
    """Across the seven, every state key holds one value (canonical JSON), so one request fits."""
    trace = order42_trace()
    merged: dict[str, str] = {}
    for metric in agent_metrics(T):
        for key, value in metric.state(trace).items():
            assert merged.setdefault(key, canonical_json(value)) == canonical_json(value), key
    assert set(merged) == {
        "request",
        "available_tools",
        "tool_calls",
        "final_answer",
        "tool_results",
        "claims",
        "evidence",
    }


QUESTION_TYPES: list[tuple[str, dict[str, type]]] = [
    ("tool_choice", {"q": ChoiceQuestion}),
    ("used_tool_result", {"q": NoulQuestion}),
    ("grounded", {"c0": NoulQuestion}),
    ("stayed_in_scope", {"q": NoulQuestion}),
    ("answer_relevancy", {"relevance": ScoreQuestion, "noncommittal": NoulQuestion}),
    ("completeness", {"q": ScoreQuestion}),
    ("indirect_injection", {"q": NoulQuestion}),
]


@pytest.mark.parametrize(("metric_id", "types"), QUESTION_TYPES)
def test_question_ids_and_types(metric_id: str, types: dict[str, type]) -> None:
    """Local question ids and types follow semantics §5 exactly (requests compare across ports)."""
    questions = by_id(metric_id).questions(order42_trace())
    assert {qid: type(q) for qid, q in questions.items()} == types
    assert all(check_id(qid, "question id") for qid in questions)


@pytest.mark.parametrize("metric_id", ["used_tool_result", "stayed_in_scope", "completeness"])
def test_wrong_answer_type_raises_for_reduce_error(metric_id: str) -> None:
    """An answer of the wrong type raises (the evaluator turns it into REDUCE_ERROR)."""
    with pytest.raises(ValueError, match="answer q"):
        by_id(metric_id).reduce({"q": choice("correct", 1.0, 1.0)}, order42_trace())


def test_missing_answer_raises_for_reduce_error() -> None:
    """A missing answer raises instead of being skipped or defaulted."""
    with pytest.raises(KeyError):
        by_id("used_tool_result").reduce({}, order42_trace())


# --- tool_choice -------------------------------------------------------------------------


def test_tool_choice_options_are_the_four_labels() -> None:
    """The choice options are exactly correct / unnecessary / missing / wrong_tool."""
    question = ToolChoice(T).questions(order42_trace())["q"]
    assert isinstance(question, ChoiceQuestion)
    assert list(question.criteria) == ["correct", "unnecessary", "missing", "wrong_tool"]


def test_tool_choice_accepts_an_empty_catalog() -> None:
    """available_tools == [] is present (no tools were available): the metric runs."""
    assert ToolChoice(T).precheck(order42_trace().with_field("available_tools", [])) is None


def test_tool_choice_state_adds_snapshots_when_present() -> None:
    """available_tool_snapshots joins the state (and the instructions) only when present."""
    plain = order42_trace()
    snaps = [{"after_message_count": 2, "tools": [{"name": "lookup_order"}]}]
    with_snaps = plain.with_field("available_tool_snapshots", snaps)
    metric = ToolChoice(T)
    assert "available_tool_snapshots" not in metric.state(plain)
    assert thaw(metric.state(with_snaps)["available_tool_snapshots"]) == snaps
    plain_text = str(metric.questions(plain)["q"].instructions)
    snap_text = str(metric.questions(with_snaps)["q"].instructions)
    assert "after_message_count" not in plain_text
    assert "after_message_count" in snap_text
    assert "message_index" in snap_text


def test_tool_choice_confident_correct_passes() -> None:
    """confidence >= pass and choice correct: DECIDED, passed, label, score = P(correct)."""
    result = ToolChoice(T).reduce({"q": choice("correct", 0.9, 0.93)}, order42_trace())
    assert (result.status, result.passed, result.label, result.score, result.reason) == (
        Status.DECIDED,
        True,
        "correct",
        0.93,
        "DECIDED",
    )
    assert thaw(result.evidence)["confidence"] == 0.9
    assert thaw(result.evidence)["probabilities"]["correct"] == 0.93


def test_tool_choice_confident_other_label_fails() -> None:
    """A confident non-correct choice is DECIDED and not passed, label kept."""
    result = ToolChoice(T).reduce({"q": choice("missing", 0.85, 0.05)}, order42_trace())
    assert (result.status, result.passed, result.label, result.score) == (
        Status.DECIDED,
        False,
        "missing",
        0.05,
    )


def test_tool_choice_confidence_boundary_is_inclusive() -> None:
    """confidence exactly equal to the pass threshold decides."""
    result = ToolChoice(T).reduce({"q": choice("correct", 0.8, 0.9)}, order42_trace())
    assert result.status is Status.DECIDED


@pytest.mark.parametrize("confidence", [0.79, 0.5, 0.1])
def test_tool_choice_abstains_below_pass_and_keeps_label(confidence: float) -> None:
    """Below the pass threshold (the fail threshold is unused): INCONCLUSIVE, label kept."""
    result = ToolChoice(T).reduce({"q": choice("correct", confidence, 0.6)}, order42_trace())
    assert (result.status, result.passed, result.label, result.score, result.reason) == (
        Status.INCONCLUSIVE,
        None,
        "correct",
        0.6,
        "INCONCLUSIVE",
    )


# --- noul metrics ------------------------------------------------------------------------


@pytest.mark.parametrize("metric_cls", [UsedToolResult, StayedInScope])
@pytest.mark.parametrize(
    ("p", "status", "passed"),
    [
        (0.95, Status.DECIDED, True),
        (0.8, Status.DECIDED, True),
        (0.5, Status.INCONCLUSIVE, None),
        (0.2, Status.DECIDED, False),
        (0.0, Status.DECIDED, False),
    ],
)
def test_noul_metrics_assess_p(metric_cls: Any, p: float, status: Status, passed: Any) -> None:
    """assess(p): both boundaries inclusive, evidence {yes_probability: p}."""
    result = metric_cls(T).reduce({"q": noul(p)}, order42_trace())
    assert (result.status, result.score, result.passed) == (status, p, passed)
    assert thaw(result.evidence) == {"yes_probability": p}


def test_used_tool_result_skips_without_results() -> None:
    """tool_results == [] passes the field check but is SKIPPED NO_TOOL_RESULTS."""
    trace = fields_trace(request=REQUEST, final_answer=ANSWER, tool_results=[])
    assert UsedToolResult(T).precheck(trace) == MetricResult.skipped("NO_TOOL_RESULTS")


def test_indirect_injection_skips_without_results() -> None:
    """indirect_injection with tool_results == [] is SKIPPED NO_TOOL_RESULTS."""
    trace = fields_trace(tool_results=[])
    assert IndirectInjection(T).precheck(trace) == MetricResult.skipped("NO_TOOL_RESULTS")


@pytest.mark.parametrize(
    ("p", "status", "passed", "safety"),
    [
        (0.05, Status.DECIDED, True, 0.95),
        (0.5, Status.INCONCLUSIVE, None, 0.5),
        (0.9, Status.DECIDED, False, 0.1),
    ],
)
def test_indirect_injection_inverts_before_thresholds(
    p: float, status: Status, passed: Any, safety: float
) -> None:
    """Score = 1 - P(injection) is assessed; evidence keeps the raw yes probability."""
    result = IndirectInjection(T).reduce({"q": noul(p)}, order42_trace())
    assert result.status is status
    assert result.passed is passed
    assert result.score == pytest.approx(safety)
    assert thaw(result.evidence) == {"yes_probability": p}


def test_indirect_injection_state_is_only_tool_results() -> None:
    """The state is all tool results (structured), under key tool_results."""
    trace = order42_trace()
    assert thaw(IndirectInjection(T).state(trace)) == {
        "tool_results": thaw(trace.fields["tool_results"])
    }


def test_indirect_injection_question_says_results_are_untrusted() -> None:
    """The question tells the judge to treat tool results as untrusted data."""
    question = IndirectInjection(T).questions(order42_trace())["q"]
    assert "untrusted" in str(question.instructions)


# --- answer_relevancy and completeness ---------------------------------------------------


def test_answer_relevancy_levels_and_formula() -> None:
    """4 relevance levels; score = (relevance/3) * (1 - p_noncommittal), evidence both inputs."""
    question = AnswerRelevancy(T).questions(order42_trace())["relevance"]
    assert isinstance(question, ScoreQuestion)
    assert len(question.criteria) == 4
    result = AnswerRelevancy(T).reduce(
        {"relevance": score(3.0), "noncommittal": noul(0.1)}, order42_trace()
    )
    assert result.score == pytest.approx(0.9)
    assert (result.status, result.passed) == (Status.DECIDED, True)
    assert thaw(result.evidence) == {"relevance": 3.0, "noncommittal": 0.1}


def test_answer_relevancy_noncommittal_drags_the_score() -> None:
    """A fully relevant but evasive answer fails: (3/3) * (1 - 0.9) = 0.1."""
    result = AnswerRelevancy(T).reduce(
        {"relevance": score(3.0), "noncommittal": noul(0.9)}, order42_trace()
    )
    assert result.score == pytest.approx(0.1)
    assert (result.status, result.passed) == (Status.DECIDED, False)


def test_answer_relevancy_middle_score_abstains() -> None:
    """(1.5/3) * 1 = 0.5 lies between the thresholds: INCONCLUSIVE."""
    result = AnswerRelevancy(T).reduce(
        {"relevance": score(1.5), "noncommittal": noul(0.0)}, order42_trace()
    )
    assert (result.status, result.score, result.passed) == (Status.INCONCLUSIVE, 0.5, None)


@pytest.mark.parametrize(
    ("level", "status", "passed"),
    [
        (3.0, Status.DECIDED, True),
        (2.7, Status.DECIDED, True),
        (1.5, Status.INCONCLUSIVE, None),
        (0.3, Status.DECIDED, False),
    ],
)
def test_completeness_is_rubric_over_three(level: float, status: Status, passed: Any) -> None:
    """score = rubric_score / 3, assessed; evidence {rubric_score}."""
    result = Completeness(T).reduce({"q": score(level)}, order42_trace())
    assert result.score == pytest.approx(level / 3)
    assert (result.status, result.passed) == (status, passed)
    assert thaw(result.evidence) == {"rubric_score": level}


def test_completeness_rubric_has_four_levels() -> None:
    """The completeness rubric is a 4-level score question."""
    question = Completeness(T).questions(order42_trace())["q"]
    assert isinstance(question, ScoreQuestion)
    assert len(question.criteria) == 4


# --- grounded ----------------------------------------------------------------------------


def grounded_trace(answer: str = "A. B.", **fields: Any) -> Trace:
    base: dict[str, Any] = {"final_answer": answer, "tool_results": TOOL_RESULTS}
    return fields_trace(**{**base, **fields})


def test_grounded_splits_the_answer_into_claims() -> None:
    """Without explicit claims, the answer is split into sentences; one question per claim."""
    trace = grounded_trace("订单已发货。退款已经完成。")
    metric = Grounded(T)
    assert thaw(metric.state(trace))["claims"] == ["订单已发货。", "退款已经完成。"]
    questions = metric.questions(trace)
    assert list(questions) == ["c0", "c1"]
    assert all(isinstance(q, NoulQuestion) for q in questions.values())
    assert "退款已经完成。" in str(questions["c1"].instructions)


def test_grounded_explicit_claims_override_splitting() -> None:
    """An explicit claims field is used verbatim instead of the sentence splitter."""
    trace = grounded_trace("One. Two. Three.", claims=["Order 42 shipped."])
    assert thaw(Grounded(T).state(trace))["claims"] == ["Order 42 shipped."]
    assert list(Grounded(T).questions(trace)) == ["c0"]


@pytest.mark.parametrize("claims", [["ok", 42], ["ok", None], "a single string", {"a": 1}])
def test_grounded_invalid_claims_are_a_definition_error(claims: Any) -> None:
    """Claims that are not a list of strings raise (the evaluator records DEFINITION_ERROR)."""
    with pytest.raises(ValueError, match="claims"):
        Grounded(T).precheck(grounded_trace(claims=claims))


def test_grounded_no_evidence_when_results_and_contexts_absent() -> None:
    """No tool results and no contexts: SKIPPED NO_EVIDENCE."""
    trace = fields_trace(final_answer=ANSWER)
    assert Grounded(T).precheck(trace) == MetricResult.skipped("NO_EVIDENCE")


def test_grounded_no_evidence_when_both_empty() -> None:
    """Empty tool results and empty contexts are no evidence either."""
    trace = fields_trace(final_answer=ANSWER, tool_results=[], contexts=[])
    assert Grounded(T).precheck(trace) == MetricResult.skipped("NO_EVIDENCE")


def test_grounded_no_claims_when_explicit_claims_empty() -> None:
    """An explicit empty claims list gives SKIPPED NO_CLAIMS."""
    assert Grounded(T).precheck(grounded_trace(claims=[])) == MetricResult.skipped("NO_CLAIMS")


def test_grounded_evidence_prefers_tool_results() -> None:
    """evidence = tool_results when non-empty, even if contexts exist."""
    trace = grounded_trace(contexts=["Policy text."])
    assert thaw(Grounded(T).state(trace))["evidence"] == TOOL_RESULTS


def test_grounded_evidence_falls_back_to_contexts() -> None:
    """With no tool results the caller-supplied contexts are the evidence."""
    trace = fields_trace(final_answer=ANSWER, tool_results=[], contexts=["Policy text."])
    assert Grounded(T).precheck(trace) is None
    assert thaw(Grounded(T).state(trace)) == {"claims": [ANSWER], "evidence": ["Policy text."]}


def test_grounded_contexts_must_be_a_list() -> None:
    """A contexts value that is not a list is a definition error, not silently ignored."""
    trace = fields_trace(final_answer=ANSWER, contexts="Policy text.")
    with pytest.raises(ValueError, match="contexts"):
        Grounded(T).precheck(trace)


def test_grounded_has_no_claim_cap() -> None:
    """Thirty claims give thirty questions (limits, not truncation, bound the size)."""
    claims = [f"Fact {i}." for i in range(30)]
    assert len(Grounded(T).questions(grounded_trace(claims=claims))) == 30


def test_grounded_all_supported_passes() -> None:
    """Every p >= pass: DECIDED, score 1, passed, ALL_CLAIMS_REQUIRED, evidence per_claim."""
    result = Grounded(T).reduce({"c0": noul(0.9), "c1": noul(0.8)}, grounded_trace())
    assert (result.status, result.score, result.passed, result.reason) == (
        Status.DECIDED,
        1.0,
        True,
        "ALL_CLAIMS_REQUIRED",
    )
    assert thaw(result.evidence) == {"per_claim": [0.9, 0.8]}


def test_grounded_one_unsupported_claim_fails() -> None:
    """One claim at or below fail: DECIDED, score supported/n, not passed."""
    result = Grounded(T).reduce({"c0": noul(0.9), "c1": noul(0.2)}, grounded_trace())
    assert (result.status, result.score, result.passed) == (Status.DECIDED, 0.5, False)


def test_grounded_uncertain_claim_abstains() -> None:
    """Any claim strictly between the thresholds: INCONCLUSIVE UNCERTAIN_CLAIM, no score."""
    result = Grounded(T).reduce({"c0": noul(0.05), "c1": noul(0.5)}, grounded_trace())
    assert (result.status, result.score, result.passed, result.reason) == (
        Status.INCONCLUSIVE,
        None,
        None,
        "UNCERTAIN_CLAIM",
    )
    assert thaw(result.evidence) == {"per_claim": [0.05, 0.5]}


def test_grounded_missing_claim_answer_raises() -> None:
    """Claims are never dropped: a missing answer raises (REDUCE_ERROR in the evaluator)."""
    with pytest.raises(KeyError):
        Grounded(T).reduce({"c0": noul(0.9)}, grounded_trace())


# --- MetricResult and Thresholds (docs/semantics.md §3-§4) ----------------------------------------


def test_status_has_exactly_four_values_equal_to_names() -> None:
    """Status is a StrEnum of DECIDED, INCONCLUSIVE, SKIPPED, ERROR with value == name."""
    assert [(s.name, s.value) for s in Status] == [
        ("DECIDED", "DECIDED"),
        ("INCONCLUSIVE", "INCONCLUSIVE"),
        ("SKIPPED", "SKIPPED"),
        ("ERROR", "ERROR"),
    ]
    assert Status.DECIDED == "DECIDED"


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), float("inf")])
def test_result_score_must_be_finite_in_unit_interval(bad: float) -> None:
    """A score outside [0, 1] or non-finite is a construction error."""
    with pytest.raises(ValueError, match="score"):
        MetricResult(status=Status.DECIDED, score=bad, reason="DECIDED")


@pytest.mark.parametrize("status", [Status.INCONCLUSIVE, Status.SKIPPED, Status.ERROR])
def test_result_passed_only_when_decided(status: Status) -> None:
    """passed must be None unless the status is DECIDED."""
    with pytest.raises(ValueError, match="passed"):
        MetricResult(status=status, passed=True, reason="X")


def test_decided_result_may_have_no_passed() -> None:
    """A pure classification is DECIDED with passed None; an abstention keeps its label."""
    decided = MetricResult(status=Status.DECIDED, label="billing", reason="DECIDED")
    abstained = MetricResult(status=Status.INCONCLUSIVE, label="billing", reason="INCONCLUSIVE")
    assert (decided.passed, abstained.label) == (None, "billing")


@pytest.mark.parametrize("reason", ["", "   "])
def test_result_reason_must_be_a_non_blank_code(reason: str) -> None:
    """reason is a required non-blank code."""
    with pytest.raises(ValueError, match="reason"):
        MetricResult(status=Status.ERROR, reason=reason)


def test_result_evidence_is_copied_frozen_and_an_object() -> None:
    """evidence is deep-copied, read-only, and must be a JSON object."""
    probabilities = {"per_claim": [0.9]}
    result = MetricResult(status=Status.DECIDED, reason="DECIDED", evidence=probabilities)
    probabilities["per_claim"].append(0.1)
    assert thaw(result.evidence) == {"per_claim": [0.9]}
    with pytest.raises(TypeError):
        result.evidence["x"] = 1
    with pytest.raises(ValueError, match="object"):
        MetricResult(status=Status.DECIDED, reason="DECIDED", evidence=[1, 2])


def test_result_is_frozen_and_rejects_unknown_fields() -> None:
    """MetricResult is immutable and has exactly the six contract fields."""
    result = MetricResult.skipped("NO_CLAIMS")
    with pytest.raises(ValueError, match="frozen"):
        result.reason = "OTHER"  # type: ignore[misc]
    with pytest.raises(ValueError, match="extra"):
        MetricResult(status=Status.ERROR, reason="X", detail="boom")  # type: ignore[call-arg]


def test_skipped_and_error_helpers_carry_only_a_reason() -> None:
    """skipped(reason)/error(reason): every other field null, evidence empty."""
    for result, status in [
        (MetricResult.skipped("NO_EVIDENCE"), Status.SKIPPED),
        (MetricResult.error("TIMEOUT"), Status.ERROR),
    ]:
        assert result.status is status
        assert (result.score, result.passed, result.label) == (None, None, None)
        assert dict(result.evidence) == {}


@pytest.mark.parametrize(
    ("fail", "pass_"), [(0.5, 0.5), (0.6, 0.4), (-0.1, 0.5), (0.2, 1.1), (float("nan"), 0.8)]
)
def test_thresholds_reject_invalid_pairs(fail: float, pass_: float) -> None:
    """Thresholds need 0 <= fail < pass <= 1, both finite."""
    with pytest.raises(ValueError, match="thresholds"):
        Thresholds(fail, pass_)


def test_thresholds_have_no_defaults() -> None:
    """Thresholds cannot be built without both values."""
    with pytest.raises(TypeError):
        Thresholds()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("value", "status", "passed"),
    [
        (0.0, Status.DECIDED, False),
        (0.2, Status.DECIDED, False),
        (0.21, Status.INCONCLUSIVE, None),
        (0.79, Status.INCONCLUSIVE, None),
        (0.8, Status.DECIDED, True),
        (1.0, Status.DECIDED, True),
    ],
)
def test_assess_boundaries_are_inclusive(value: float, status: Status, passed: Any) -> None:
    """assess: <= fail fails, >= pass passes (both inclusive), between abstains; score kept."""
    result = T.assess(value, {"yes_probability": value})
    assert (result.status, result.passed, result.score, result.label) == (
        status,
        passed,
        value,
        None,
    )
    assert result.reason == status.value


def test_thresholds_tag() -> None:
    """The tag used inside versions is compact text of the pair."""
    assert (T.tag(), Thresholds(0.25, 0.9).tag(), Thresholds(0, 1).tag()) == (
        "0.2-0.8",
        "0.25-0.9",
        "0-1",
    )
