"""Evaluator construction, planning, per-group outcomes and the Report (docs/semantics.md §6)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from tests.evaluation.engine_kit import (
    CANARY,
    BoomError,
    Probe,
    ScriptedJudge,
    answer_all,
    make_trace,
    noul,
)
from worker.evaluation import (
    Entry,
    Evaluator,
    Limits,
    MetricResult,
    Reason,
    Report,
    RequestUsage,
    Status,
    Trace,
)
from worker.judges import (
    ChoiceQuestion,
    InvalidReply,
    JudgeError,
    JudgeRequest,
    JudgeResponse,
    NoulAnswer,
    Usage,
    remaining_s,
)

DECIDED_TRUE = MetricResult(status=Status.DECIDED, score=1.0, passed=True, reason="CUSTOM")


def _evaluator(*metrics: Any, judge: Any = None, **limits: Any) -> Evaluator:
    return Evaluator(ScriptedJudge() if judge is None else judge, metrics, Limits(**limits))


# -- construction ------------------------------------------------------------------------


def test_limits_defaults() -> None:
    """Limits default to a 3 s budget, 128 questions and 100 000 state chars."""
    limits = Limits()
    assert (limits.budget_s, limits.max_questions, limits.max_state_chars) == (3.0, 128, 100_000)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget_s": 0},
        {"budget_s": -1.0},
        {"budget_s": float("nan")},
        {"budget_s": float("inf")},
        {"max_questions": 0},
        {"max_questions": True},
        {"max_state_chars": 0},
        {"max_state_chars": -5},
    ],
)
def test_limits_reject_non_positive(kwargs: dict[str, Any]) -> None:
    """Every limit must be a positive (finite) number; anything else is a ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - the contract is "ValueError"
        Limits(**kwargs)


def test_limits_are_frozen() -> None:
    """Limits cannot be changed after construction."""
    limits = Limits(budget_s=1.0)
    with pytest.raises(ValidationError):
        limits.budget_s = 2.0  # type: ignore[misc]


def test_rejects_no_metrics() -> None:
    """An evaluator needs at least one metric."""
    with pytest.raises(ValueError, match="metrics"):
        Evaluator(ScriptedJudge(), [])


def test_accepts_128_rejects_129_metrics() -> None:
    """128 metrics are allowed, 129 are not."""
    metrics = [Probe(f"m{i}") for i in range(129)]
    assert len(Evaluator(ScriptedJudge(), metrics[:128]).metric_ids) == 128
    with pytest.raises(ValueError, match="metrics"):
        Evaluator(ScriptedJudge(), metrics)


def test_rejects_duplicate_ids() -> None:
    """Two metrics with the same id are rejected at construction."""
    with pytest.raises(ValueError, match="unique"):
        Evaluator(ScriptedJudge(), [Probe("same"), Probe("same")])


def test_rejects_same_instance_twice() -> None:
    """Configuring one metric instance twice is a duplicate too."""
    metric = Probe("once")
    with pytest.raises(ValueError, match="unique"):
        Evaluator(ScriptedJudge(), [metric, metric])


@pytest.mark.parametrize("bad_id", ["", "1abc", "_x", "a-b", "a.b", "a b", "é", "a" * 65])
def test_rejects_ids_failing_the_regex(bad_id: str) -> None:
    """Metric ids must match ^[A-Za-z][A-Za-z0-9_]{0,63}$."""
    with pytest.raises(ValueError, match="metric id"):
        Evaluator(ScriptedJudge(), [Probe(bad_id)])


def test_accepts_64_char_id() -> None:
    """An id of exactly 64 characters (letter first) is valid."""
    long_id = "a" + "B_9" * 21
    assert Evaluator(ScriptedJudge(), [Probe(long_id)]).metric_ids == (long_id,)


@pytest.mark.parametrize("version", ["", "   "])
def test_rejects_blank_version(version: str) -> None:
    """A metric needs a non-blank version."""
    with pytest.raises(ValueError, match="version"):
        Evaluator(ScriptedJudge(), [Probe("m", version=version)])


def test_metric_ids_property_is_tuple_in_order() -> None:
    """metric_ids is a tuple of the ids in configuration order."""
    evaluator = Evaluator(ScriptedJudge(), [Probe("b"), Probe("a"), Probe("c")])
    assert evaluator.metric_ids == ("b", "a", "c")


@pytest.mark.asyncio
async def test_evaluate_rejects_non_trace() -> None:
    """evaluate() needs a Trace; anything else is a ValueError before any metric runs."""
    metric = Probe("m")
    with pytest.raises(ValueError, match="Trace"):
        await Evaluator(ScriptedJudge(), [metric]).evaluate({"id": "t1"})  # type: ignore[arg-type]
    assert metric.calls == []


# -- planning ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_issues_skip_every_metric() -> None:
    """Any trace issue makes every metric SKIPPED INCOMPLETE_TRACE, without calling it."""
    asker, decider = Probe("asker"), Probe("decider", early=DECIDED_TRUE)
    judge = ScriptedJudge()
    report = await Evaluator(judge, [asker, decider]).evaluate(
        make_trace(issues=("PENDING_TOOL_CALL",))
    )
    assert [e.result for e in report.results] == [MetricResult.skipped("INCOMPLETE_TRACE")] * 2
    assert (asker.calls, decider.calls, judge.requests, report.requests) == ([], [], [], 0)


@pytest.mark.asyncio
async def test_precheck_result_is_final() -> None:
    """A non-null precheck result is used as is; state, questions and the judge are not used."""
    metric = Probe("m", early=DECIDED_TRUE)
    judge = ScriptedJudge()
    report = await Evaluator(judge, [metric]).evaluate(make_trace())
    assert report.result("m") == DECIDED_TRUE
    assert (metric.calls, judge.requests, report.requests) == (["precheck"], [], 0)


@pytest.mark.asyncio
async def test_precheck_returning_non_result_is_definition_error() -> None:
    """A precheck that returns something other than a MetricResult is a DEFINITION_ERROR."""
    report = await _evaluator(Probe("m", early={"status": "DECIDED"})).evaluate(make_trace())
    assert report.result("m") == MetricResult.error(Reason.DEFINITION_ERROR)


@pytest.mark.parametrize(
    "state",
    [None, ["a", "list"], "text", {"x": {1, 2}}, {"x": float("nan")}, {1: "int key"}],
    ids=["null", "list", "string", "set-value", "nan", "int-key"],
)
@pytest.mark.asyncio
async def test_bad_state_is_definition_error(state: object) -> None:
    """A null, non-object or non-JSON state is a DEFINITION_ERROR for that metric only."""
    judge = ScriptedJudge()
    report = await _evaluator(Probe("bad", state_value=state), Probe("good"), judge=judge).evaluate(
        make_trace()
    )
    assert report.result("bad") == MetricResult.error(Reason.DEFINITION_ERROR)
    assert report.result("good").status is Status.DECIDED
    assert list(judge.requests[0].questions) == ["good.q"]


@pytest.mark.asyncio
async def test_state_is_snapshotted_before_questions() -> None:
    """Mutating the returned state after state() does not change what the judge sees."""
    state: dict[str, Any] = {"evidence": ["original"]}

    class Mutating(Probe):
        def questions(self, trace: Trace) -> Any:
            state["evidence"].append("mutated")
            state["extra"] = True
            return super().questions(trace)

    judge = ScriptedJudge()
    await _evaluator(Mutating("m", state_value=state), judge=judge).evaluate(make_trace())
    assert dict(judge.requests[0].state) == {"evidence": ("original",)}


@pytest.mark.asyncio
@pytest.mark.parametrize("qid", ["1q", "q-1", "q.1", "", "a" * 65])
async def test_bad_local_question_id_is_definition_error(qid: str) -> None:
    """Local question ids must match the metric-id regex, else DEFINITION_ERROR."""
    report = await _evaluator(Probe("m", questions_value={qid: noul()}), Probe("ok")).evaluate(
        make_trace()
    )
    assert report.result("m") == MetricResult.error(Reason.DEFINITION_ERROR)
    assert report.result("ok").status is Status.DECIDED


@pytest.mark.parametrize(
    "question",
    [
        {"type": "choice", "instructions": "pick", "criteria": {"only": None}},
        {"type": "score", "instructions": "rate", "criteria": [str(i) for i in range(11)]},
        {"type": "noul"},
        {"type": "probability", "instructions": "p?"},
        "Is it so?",
        None,
    ],
    ids=["1-option-choice", "11-level-score", "no-instructions", "unknown-type", "str", "none"],
)
@pytest.mark.asyncio
async def test_invalid_question_is_definition_error(question: object) -> None:
    """Questions are validated by the A.2 request rules; a violation is DEFINITION_ERROR."""
    judge = ScriptedJudge()
    report = await _evaluator(
        Probe("bad", questions_value={"q": question}), Probe("good"), judge=judge
    ).evaluate(make_trace())
    assert report.result("bad") == MetricResult.error(Reason.DEFINITION_ERROR)
    assert list(judge.requests[0].questions) == ["good.q"]


@pytest.mark.asyncio
async def test_questions_not_a_mapping_is_definition_error() -> None:
    """questions() must return a mapping."""
    report = await _evaluator(Probe("m", questions_value=[noul()])).evaluate(make_trace())
    assert report.result("m") == MetricResult.error(Reason.DEFINITION_ERROR)


@pytest.mark.asyncio
async def test_dict_questions_are_validated_into_typed_questions() -> None:
    """Questions given as wire dicts are accepted and sent as typed questions."""
    judge = ScriptedJudge()
    wire = {"type": "choice", "instructions": "pick", "criteria": {"a": None, "b": "B"}}
    report = await _evaluator(Probe("m", questions_value={"q": wire}), judge=judge).evaluate(
        make_trace()
    )
    sent = judge.requests[0].questions["m.q"]
    assert isinstance(sent, ChoiceQuestion)
    assert dict(sent.criteria) == {"a": None, "b": "B"}
    assert report.result("m").status is Status.DECIDED


@pytest.mark.asyncio
@pytest.mark.parametrize("step", ["precheck", "state", "questions"])
async def test_planning_exception_isolated_to_its_metric(step: str) -> None:
    """An exception in precheck/state/questions is DEFINITION_ERROR for that metric only."""
    report = await _evaluator(Probe("bad", fail_in=step), Probe("good")).evaluate(make_trace())
    assert report.result("bad") == MetricResult.error(Reason.DEFINITION_ERROR)
    assert report.result("good").status is Status.DECIDED


@pytest.mark.asyncio
async def test_question_count_limit() -> None:
    """More questions than max_questions is SKIPPED EVALUATION_LIMIT; exactly the max is fine."""
    three = {f"q{i}": noul() for i in range(3)}
    four = {f"q{i}": noul() for i in range(4)}
    judge = ScriptedJudge()
    report = await _evaluator(
        Probe("over", questions_value=four),
        Probe("at", questions_value=three),
        judge=judge,
        max_questions=3,
    ).evaluate(make_trace())
    assert report.result("over") == MetricResult.skipped(Reason.EVALUATION_LIMIT)
    assert report.result("at").status is Status.DECIDED
    assert len(judge.requests) == 1
    assert len(judge.requests[0].questions) == 3


@pytest.mark.asyncio
async def test_state_size_limit_counts_utf16_units() -> None:
    """State size is compact JSON in UTF-16 units (an emoji counts 2); over the limit is SKIPPED."""
    # {"k":"😀😀"} is 8 ASCII chars + 2 astral chars = 12 UTF-16 units.
    at_limit = Probe("at", state_value={"k": "😀😀"})
    over = Probe("over", state_value={"k": "😀😀x"})
    report = await _evaluator(at_limit, over, max_state_chars=12).evaluate(make_trace())
    assert report.result("at").status is Status.DECIDED
    assert report.result("over") == MetricResult.skipped(Reason.EVALUATION_LIMIT)


@pytest.mark.asyncio
async def test_limit_checked_before_no_question_shortcut() -> None:
    """A question-less metric with an oversized state is SKIPPED and reduce is never called."""
    metric = Probe("m", state_value={"big": "x" * 50}, questions_value={})
    report = await _evaluator(metric, max_state_chars=20).evaluate(make_trace())
    assert report.result("m") == MetricResult.skipped(Reason.EVALUATION_LIMIT)
    assert "reduce" not in metric.calls


@pytest.mark.asyncio
async def test_no_questions_reduces_empty_answers_without_request() -> None:
    """With no questions, reduce({}) gives the result and no request is made."""
    metric = Probe("m", questions_value={}, reducer=lambda answers, trace: DECIDED_TRUE)
    judge = ScriptedJudge()
    report = await _evaluator(metric, judge=judge).evaluate(make_trace())
    assert report.result("m") == DECIDED_TRUE
    assert metric.seen_answers == [{}]
    assert (judge.requests, report.requests, report.usage) == ([], 0, ())


@pytest.mark.asyncio
@pytest.mark.parametrize("outcome", ["none", "raise", "object"])
async def test_no_question_reduce_failure_is_definition_error(outcome: str) -> None:
    """A deterministic reduce that returns None/non-result or raises is a DEFINITION_ERROR."""

    def reducer(answers: Mapping[str, Any], trace: Trace) -> Any:
        if outcome == "raise":
            raise BoomError
        return None if outcome == "none" else {"passed": True}

    report = await _evaluator(Probe("m", questions_value={}, reducer=reducer)).evaluate(
        make_trace()
    )
    assert report.result("m") == MetricResult.error(Reason.DEFINITION_ERROR)


# -- execution ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_request_is_namespaced_without_model() -> None:
    """The request carries the merged state, `metric.qid` ids and no model."""
    judge = ScriptedJudge()
    a = Probe("alpha", state_value={"request": "hi"}, questions_value={"q": noul(), "r": noul()})
    b = Probe("beta", state_value={"answer": "yo"})
    await _evaluator(a, b, judge=judge).evaluate(make_trace())
    (request,) = judge.requests
    assert request.model is None
    assert "model" not in request.wire()
    assert list(request.questions) == ["alpha.q", "alpha.r", "beta.q"]
    assert dict(request.state) == {"request": "hi", "answer": "yo"}


@pytest.mark.asyncio
async def test_reduce_gets_only_its_own_local_answers() -> None:
    """Answers are un-namespaced: each member sees {local qid: answer} for its questions only."""

    def reply(request: JudgeRequest, _call: int) -> JudgeResponse:
        answers = {
            qid: NoulAnswer(noul=0.1 if qid.startswith("a.") else 0.7) for qid in request.questions
        }
        return JudgeResponse(
            model="m", answers=answers, usage=Usage(input_tokens=1, output_tokens=1)
        )

    a = Probe("a", questions_value={"q": noul(), "r": noul()})
    b = Probe("b")
    await _evaluator(a, b, judge=ScriptedJudge(reply=reply)).evaluate(make_trace())
    assert {k: v.noul for k, v in a.seen_answers[0].items()} == {"q": 0.1, "r": 0.1}  # type: ignore[union-attr]
    assert {k: v.noul for k, v in b.seen_answers[0].items()} == {"q": 0.7}  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_none_reply_is_invalid_response() -> None:
    """A judge returning None gives INVALID_RESPONSE for all members and no usage entry."""
    judge = ScriptedJudge(reply=lambda request, call: None)
    report = await _evaluator(Probe("a"), Probe("b"), judge=judge).evaluate(make_trace())
    assert [e.result.reason for e in report.results] == ["INVALID_RESPONSE"] * 2
    assert all(e.result.status is Status.ERROR for e in report.results)
    assert (report.requests, report.usage) == (1, ())


@pytest.mark.asyncio
async def test_non_response_reply_is_invalid_response() -> None:
    """A reply that is not a JudgeResponse (e.g. a wire dict) is INVALID_RESPONSE, no usage."""

    def reply(request: JudgeRequest, _call: int) -> Any:
        return answer_all(request).wire()

    report = await _evaluator(Probe("a"), judge=ScriptedJudge(reply=reply)).evaluate(make_trace())
    assert report.result("a") == MetricResult.error(Reason.INVALID_RESPONSE)
    assert report.usage == ()


@pytest.mark.parametrize(
    "error",
    [
        JudgeError("HTTP 500", status=500, retryable=True),
        BoomError(),
        TimeoutError(),
        ValueError("x"),
    ],
    ids=["judge-error", "runtime", "own-timeout-error", "value-error"],
)
@pytest.mark.asyncio
async def test_judge_exception_is_backend_error(error: Exception) -> None:
    """Any exception from the judge is BACKEND_ERROR for all members, with no usage entry."""
    judge = ScriptedJudge(reply=lambda request, call: error)
    report = await _evaluator(Probe("a"), Probe("b"), judge=judge).evaluate(make_trace())
    assert [e.result for e in report.results] == [MetricResult.error("BACKEND_ERROR")] * 2
    assert (report.requests, report.usage) == (1, ())


@pytest.mark.asyncio
async def test_raise_before_first_await_is_backend_error() -> None:
    """An async judge that raises before it ever awaits is treated as a backend error."""

    async def judge(request: JudgeRequest) -> JudgeResponse:
        raise BoomError

    report = await _evaluator(Probe("a"), judge=judge).evaluate(make_trace())
    assert report.result("a") == MetricResult.error(Reason.BACKEND_ERROR)
    assert report.requests == 1


@pytest.mark.parametrize(
    "usage", [Usage(input_tokens=7, output_tokens=3), None], ids=["with-usage", "no-usage"]
)
@pytest.mark.asyncio
async def test_invalid_reply_keeps_usage(usage: Usage | None) -> None:
    """InvalidReply(model, usage) is INVALID_RESPONSE and its usage is recorded once."""
    judge = ScriptedJudge(reply=lambda request, call: InvalidReply("llm:qwen", usage))
    report = await _evaluator(Probe("a"), Probe("b"), judge=judge).evaluate(make_trace())
    assert [e.result for e in report.results] == [MetricResult.error("INVALID_RESPONSE")] * 2
    assert report.usage == (RequestUsage(model="llm:qwen", usage=usage),)


def _drop_answer(request: JudgeRequest, _call: int) -> JudgeResponse:
    good = answer_all(request, usage=Usage(input_tokens=5, output_tokens=1))
    first = next(iter(good.answers))
    answers = {k: v for k, v in good.answers.items() if k != first}
    return JudgeResponse(model=good.model, answers=answers, usage=good.usage)


def _extra_answer(request: JudgeRequest, _call: int) -> JudgeResponse:
    good = answer_all(request, usage=Usage(input_tokens=5, output_tokens=1))
    answers = {**good.answers, "zzz.q": NoulAnswer(noul=0.5)}
    return JudgeResponse(model=good.model, answers=answers, usage=good.usage)


def _out_of_range(request: JudgeRequest, _call: int) -> JudgeResponse:
    return answer_all(request, p=1.5, usage=Usage(input_tokens=5, output_tokens=1))


def _negative_usage(request: JudgeRequest, _call: int) -> JudgeResponse:
    return answer_all(request, usage=Usage(input_tokens=-1, output_tokens=1))


@pytest.mark.asyncio
@pytest.mark.parametrize("reply", [_drop_answer, _extra_answer, _out_of_range, _negative_usage])
async def test_invalid_response_records_usage_first(reply: Any) -> None:
    """A response failing validation is INVALID_RESPONSE for all members, but its usage is kept."""
    report = await _evaluator(Probe("a"), Probe("b"), judge=ScriptedJudge(reply=reply)).evaluate(
        make_trace()
    )
    assert [e.result for e in report.results] == [MetricResult.error("INVALID_RESPONSE")] * 2
    assert len(report.usage) == 1
    assert report.usage[0].model == "test-judge"
    assert report.usage[0].usage is not None


class _Promising(ScriptedJudge):
    """A scripted judge that claims to validate its own replies (``validates_replies``)."""

    validates_replies = True


@pytest.mark.asyncio
async def test_a_judge_that_validates_its_replies_is_not_checked_again() -> None:
    """validates_replies=True: the evaluator uses the reply as given (the judge's promise)."""
    judge = _Promising(reply=_negative_usage)
    report = await _evaluator(Probe("a"), judge=judge).evaluate(make_trace())
    assert report.result("a").reason != Reason.INVALID_RESPONSE  # reduced, not re-checked
    assert report.result("a") == (await _evaluator(Probe("a")).evaluate(make_trace())).result("a")


@pytest.mark.asyncio
@pytest.mark.parametrize("marker", [False, "yes", 1])
async def test_only_a_true_marker_skips_validation(marker: object) -> None:
    """Any validates_replies other than True leaves response validation on."""
    judge = ScriptedJudge(reply=_negative_usage)
    judge.validates_replies = marker  # type: ignore[attr-defined]
    report = await _evaluator(Probe("a"), judge=judge).evaluate(make_trace())
    assert report.result("a") == MetricResult.error(Reason.INVALID_RESPONSE)


@pytest.mark.asyncio
async def test_missing_usage_is_invalid_with_null_usage_entry() -> None:
    """A response without usage is invalid; its entry records the model with usage None."""

    def reply(request: JudgeRequest, _call: int) -> JudgeResponse:
        good = answer_all(request)
        return JudgeResponse(model="jev-1", answers=good.answers, usage=None)

    report = await _evaluator(Probe("a"), judge=ScriptedJudge(reply=reply)).evaluate(make_trace())
    assert report.result("a") == MetricResult.error(Reason.INVALID_RESPONSE)
    assert report.usage == (RequestUsage(model="jev-1", usage=None),)


@pytest.mark.asyncio
@pytest.mark.parametrize("outcome", ["raise", "none", "object"])
async def test_reduce_failure_is_isolated_to_its_member(outcome: str) -> None:
    """A reduce that raises or returns None/non-result is REDUCE_ERROR for that member only."""

    def reducer(answers: Mapping[str, Any], trace: Trace) -> Any:
        if outcome == "raise":
            raise BoomError
        return None if outcome == "none" else "DECIDED"

    judge = ScriptedJudge()
    report = await _evaluator(Probe("bad", reducer=reducer), Probe("good"), judge=judge).evaluate(
        make_trace()
    )
    assert report.result("bad") == MetricResult.error(Reason.REDUCE_ERROR)
    assert report.result("good").status is Status.DECIDED
    assert report.requests == 1


@pytest.mark.asyncio
async def test_group_failure_is_isolated_to_its_group() -> None:
    """A backend failure of one group does not affect the metrics of another group."""

    def reply(request: JudgeRequest, call: int) -> Any:
        return JudgeError("HTTP 503", status=503) if call == 0 else answer_all(request)

    first = Probe("first", state_value={"k": "A"})
    second = Probe("second", state_value={"k": "B"})
    report = await _evaluator(first, second, judge=ScriptedJudge(reply=reply)).evaluate(
        make_trace()
    )
    assert report.result("first") == MetricResult.error(Reason.BACKEND_ERROR)
    assert report.result("second").status is Status.DECIDED
    assert report.requests == 2
    assert len(report.usage) == 1


@pytest.mark.asyncio
async def test_usage_once_per_request_not_per_member() -> None:
    """Three metrics packed into one request give exactly one usage entry."""
    judge = ScriptedJudge()
    report = await _evaluator(Probe("a"), Probe("b"), Probe("c"), judge=judge).evaluate(
        make_trace()
    )
    assert report.requests == 1
    assert report.usage == (
        RequestUsage(model="test-judge", usage=Usage(input_tokens=10, output_tokens=2)),
    )


@pytest.mark.asyncio
async def test_judge_sees_the_evaluation_deadline() -> None:
    """During the judge call remaining_s() reflects the budget; afterwards no deadline is set."""
    seen: list[float | None] = []

    def reply(request: JudgeRequest, _call: int) -> JudgeResponse:
        seen.append(remaining_s())
        return answer_all(request)

    await _evaluator(Probe("a"), judge=ScriptedJudge(reply=reply), budget_s=2.0).evaluate(
        make_trace()
    )
    assert len(seen) == 1
    assert seen[0] is not None
    assert 1.0 < seen[0] <= 2.0
    assert remaining_s() is None


@pytest.mark.asyncio
async def test_exception_text_never_reaches_report_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Exception messages (a planted canary) appear in no result, no report JSON and no log."""
    caplog.set_level(logging.DEBUG)
    metrics = [
        Probe("pre", fail_in="precheck"),
        Probe("st", fail_in="state"),
        Probe("qs", fail_in="questions"),
        Probe("red", state_value={"k": 1}, fail_in="reduce"),
        Probe("det", questions_value={}, fail_in="reduce"),
        Probe("other", state_value={"k": 2}),
    ]

    def reply(request: JudgeRequest, call: int) -> Any:
        return answer_all(request) if call == 0 else BoomError()

    report = await _evaluator(*metrics, judge=ScriptedJudge(reply=reply)).evaluate(make_trace())
    assert [e.result.reason for e in report.results] == [
        "DEFINITION_ERROR",
        "DEFINITION_ERROR",
        "DEFINITION_ERROR",
        "REDUCE_ERROR",
        "DEFINITION_ERROR",
        "BACKEND_ERROR",
    ]
    assert CANARY not in json.dumps(report.model_dump(mode="json"))
    assert CANARY not in repr(report)
    assert caplog.records  # failures are logged (by type), so the check below is meaningful
    assert all(CANARY not in r.getMessage() and r.exc_info is None for r in caplog.records)


@pytest.mark.asyncio
async def test_elapsed_includes_planning() -> None:
    """elapsed_s covers the whole evaluate call, planning included."""

    class Slow(Probe):
        def state(self, trace: Trace) -> Any:
            time.sleep(0.05)  # a slow, synchronous metric definition
            return super().state(trace)

    report = await _evaluator(Slow("m")).evaluate(make_trace())
    assert report.elapsed_s >= 0.05


# -- report ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_results_in_configuration_order_across_groups() -> None:
    """Entries follow configuration order, not group or completion order, with id and version."""
    metrics = [
        Probe("z", state_value={"k": 1}, version="vz"),
        Probe("det", questions_value={}, version="vd"),
        Probe("y", state_value={"k": 2}, version="vy"),
        Probe("x", state_value={"k": 1}, version="vx"),
    ]
    report = await _evaluator(*metrics).evaluate(make_trace("trace-7"))
    assert report.trace_id == "trace-7"
    assert [(e.id, e.version) for e in report.results] == [
        ("z", "vz"),
        ("det", "vd"),
        ("y", "vy"),
        ("x", "vx"),
    ]
    assert report.requests == 2


def _report(*results: MetricResult) -> Report:
    entries = tuple(Entry(id=f"m{i}", version="v", result=r) for i, r in enumerate(results))
    return Report(trace_id="t", results=entries, requests=0, usage=(), elapsed_s=0.0)


def test_passed_requires_all_decided_true() -> None:
    """passed() is true iff results are non-empty and all DECIDED with passed=True."""
    true = DECIDED_TRUE
    false = MetricResult(status=Status.DECIDED, passed=False, reason="DECIDED")
    unscored = MetricResult(status=Status.DECIDED, reason="DECIDED")
    abstain = MetricResult(status=Status.INCONCLUSIVE, reason="INCONCLUSIVE")
    assert _report(true, true).passed() is True
    assert _report().passed() is False
    assert _report(true, false).passed() is False
    assert _report(true, unscored).passed() is False
    assert _report(true, abstain).passed() is False
    assert _report(true, MetricResult.skipped("MISSING_FIELDS")).passed() is False
    assert _report(true, MetricResult.error("TIMEOUT")).passed() is False


def test_result_lookup_and_unknown_id() -> None:
    """result(id) returns that metric's result; an unknown id raises KeyError."""
    report = _report(DECIDED_TRUE, MetricResult.skipped("NO_CLAIMS"))
    assert report.result("m1") == MetricResult.skipped("NO_CLAIMS")
    with pytest.raises(KeyError):
        report.result("nope")


@pytest.mark.asyncio
async def test_report_json_round_trip() -> None:
    """A report dumps to plain JSON and validates back to an equal, frozen report."""
    report = await _evaluator(Probe("a"), Probe("b", state_value={"k": [1, {"x": None}]})).evaluate(
        make_trace()
    )
    data = json.loads(json.dumps(report.model_dump(mode="json")))
    assert data["results"][0]["result"]["status"] == "DECIDED"
    assert data["usage"] == [
        {"model": "test-judge", "usage": {"input_tokens": 10, "output_tokens": 2}}
    ]
    again = Report.model_validate(data)
    assert again == report
    with pytest.raises(ValidationError):
        again.requests = 5  # type: ignore[misc]


@pytest.mark.asyncio
async def test_entries_report_the_question_ids_planned_for_the_judge() -> None:
    """`Entry.asked` holds each asked metric's local ids; metrics decided early asked none."""
    two = Probe("two", questions_value={"x": noul(), "y": noul()})
    early = Probe("early", early=MetricResult.skipped(Reason.MISSING_FIELDS))
    limited = Probe("limited", state_value={"big": "z" * 50})
    report = await _evaluator(two, early, limited, max_state_chars=20).evaluate(make_trace())
    assert {e.id: e.asked for e in report.results} == {
        "two": ("x", "y"),
        "early": (),
        "limited": (),
    }
