"""Pre-call judgments and separated records: call_appropriate, call_valid, tool_execution.

Snapshots are read from a fields-format file through the real reader, so the pre-call window,
the catalog at the call's position and the projection are the ones a worker evaluates.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from producer import Snapshot, read_snapshots
from tests.evaluation.engine_kit import ScriptedJudge, make_trace
from tests.evaluation.tool_call_kit import FIRST_RESULT, LOOKUP, SECOND_RESULT, orders_record
from worker.canonical_json import thaw
from worker.evaluation import (
    CallAppropriate,
    CallValid,
    Evaluator,
    Limits,
    Metric,
    Report,
    Status,
    Thresholds,
    ToolExecution,
    Trace,
    tool_call_metrics,
)
from worker.judges import ChoiceAnswer, JudgeRequest, JudgeResponse, Usage
from worker.metric_sets import build_metric_set, set_for_unit

THRESHOLDS = Thresholds(0.2, 0.8)


def _snapshots(tmp_path: Path, unit: str, *records: dict[str, Any]) -> list[Snapshot]:
    path = tmp_path / f"{unit}.jsonl"
    lines = [json.dumps(r) for r in (records or (orders_record(),))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return list(read_snapshots(path, unit=unit))


def _evaluate(metrics: Sequence[Metric], trace: Trace, judge: Any = None) -> tuple[Report, Any]:
    judge = ScriptedJudge() if judge is None else judge
    return asyncio.run(Evaluator(judge, metrics).evaluate(trace)), judge


def _body(request: JudgeRequest) -> str:
    return json.dumps(request.wire(), ensure_ascii=False)


# --- call_appropriate ------------------------------------------------------------------------


def test_call_appropriate_asks_once_on_the_state_before_the_call(tmp_path: Path) -> None:
    """One request: the earlier result, the call and its catalog are in it, its result is not."""
    _, cancel = _snapshots(tmp_path, "tool_call")
    report, judge = _evaluate(tool_call_metrics(THRESHOLDS), cancel.trace())
    assert report.requests == 1
    (request,) = judge.requests
    body = _body(request)
    assert SECOND_RESULT not in body
    assert "RESULT-TWO" not in body  # not even a fragment of the judged call's result
    assert FIRST_RESULT in body  # what the agent saw before the call is evidence
    state = thaw(request.state)
    assert state["proposed_call"] == {"name": "cancel_order", "arguments": {"order_id": "42"}}
    assert [t["name"] for t in state["available_tools"]] == ["lookup_order", "cancel_order"]
    assert state["request"] == "Cancel order 42 if it has not shipped."
    assert list(request.questions) == ["call_appropriate.q"]
    result = report.result("call_appropriate")
    assert (result.status, result.passed, result.label) == (Status.DECIDED, True, "correct")


def _choice(choice: str, confidence: float) -> Any:
    def reply(request: JudgeRequest, call: int) -> JudgeResponse:
        rest = (1.0 - confidence) / 3
        options = ("correct", "unnecessary", "wrong_tool", "wrong_arguments")
        probabilities = {o: confidence if o == choice else rest for o in options}
        answer = ChoiceAnswer(choice=choice, probabilities=probabilities, confidence=confidence)
        usage = Usage(input_tokens=1, output_tokens=1)
        return JudgeResponse(model="m", answers={"call_appropriate.q": answer}, usage=usage)

    return reply


@pytest.mark.parametrize(
    ("choice", "confidence", "status", "passed"),
    [
        ("correct", 0.95, Status.DECIDED, True),
        ("wrong_tool", 0.9, Status.DECIDED, False),
        ("correct", 0.6, Status.INCONCLUSIVE, None),
    ],
)
def test_call_appropriate_decides_only_when_confident(
    tmp_path: Path, choice: str, confidence: float, status: Status, passed: bool | None
) -> None:
    """Confidence >= pass decides (passed iff correct); below it the metric abstains."""
    _, cancel = _snapshots(tmp_path, "tool_call")
    report, _ = _evaluate(
        [CallAppropriate(THRESHOLDS)], cancel.trace(), ScriptedJudge(_choice(choice, confidence))
    )
    result = report.result("call_appropriate")
    assert (result.status, result.passed, result.label) == (status, passed, choice)
    assert result.reason == status.value


def test_call_appropriate_refuses_an_invalid_reply_like_every_judged_metric(tmp_path: Path) -> None:
    """A reply whose choice is not an option fails the evaluator's validation: INVALID_RESPONSE."""
    _, cancel = _snapshots(tmp_path, "tool_call")
    report, _ = _evaluate(
        [CallAppropriate(THRESHOLDS)], cancel.trace(), ScriptedJudge(_choice("maybe", 0.9))
    )
    result = report.result("call_appropriate")
    assert (result.status, result.reason) == (Status.ERROR, "INVALID_RESPONSE")


def test_call_appropriate_is_skipped_without_a_proposed_call(tmp_path: Path) -> None:
    """An invocation snapshot has no proposed call: SKIPPED MISSING_FIELDS, nothing asked."""
    (invocation,) = _snapshots(tmp_path, "invocation")
    report, judge = _evaluate([CallAppropriate(THRESHOLDS)], invocation.trace())
    assert report.result("call_appropriate").reason == "MISSING_FIELDS"
    assert (report.requests, judge.requests) == (0, [])


def test_call_appropriate_state_never_carries_a_result_of_the_proposed_call() -> None:
    """A proposed_call field given with a result (own formats) still reaches the judge bare."""
    trace = make_trace(
        request="r", messages=[], tool_calls=[], available_tools=[LOOKUP],
        proposed_call={"name": "lookup_order", "arguments": {}, "result": "LEAKED-RESULT"},
    )  # fmt: skip
    _, judge = _evaluate([CallAppropriate(THRESHOLDS)], trace)
    (request,) = judge.requests
    assert "LEAKED-RESULT" not in _body(request)


# --- call_valid --------------------------------------------------------------------------------


def _valid(call: Any, catalog: Any = (LOOKUP,)) -> tuple[Status, bool | None, str | None, str]:
    fields: dict[str, Any] = {"proposed_call": call}
    if catalog is not None:
        fields["available_tools"] = list(catalog)
    report, judge = _evaluate([CallValid()], make_trace(**fields))
    assert (report.requests, judge.requests) == (0, [])  # deterministic: never asks
    result = report.result("call_valid")
    return result.status, result.passed, result.label, result.reason


@pytest.mark.parametrize(
    ("call", "catalog", "expected"),
    [
        ({"name": "lookup_order", "arguments": {"order_id": "42"}}, (LOOKUP,),
         (Status.DECIDED, True, "valid", "VALID")),
        ({"name": "cancel_order", "arguments": {"order_id": "42"}}, (LOOKUP,),
         (Status.DECIDED, False, "unknown_tool", "UNKNOWN_TOOL")),
        ({"name": "lookup_order", "arguments": {}}, (LOOKUP,),
         (Status.DECIDED, False, "invalid_arguments", "SCHEMA_MISMATCH")),
        ({"name": "lookup_order", "arguments": {"order_id": 42}}, (LOOKUP,),
         (Status.DECIDED, False, "invalid_arguments", "SCHEMA_MISMATCH")),
        ({"name": "lookup_order", "arguments": "{order_id: 42"}, (LOOKUP,),
         (Status.DECIDED, False, "invalid_arguments", "ARGUMENTS_NOT_OBJECT")),
        ({"name": "f", "arguments": {}}, ({"name": "f", "parameters": {"type": "nope"}},),
         (Status.INCONCLUSIVE, None, None, "INVALID_SCHEMA")),
        ({"name": "f", "arguments": {"any": [1]}}, ({"name": "f", "parameters": {}},),
         (Status.DECIDED, True, "valid", "VALID")),
        ({"name": "lookup_order", "arguments": {}}, None,
         (Status.SKIPPED, None, None, "MISSING_FIELDS")),
        ({"name": "lookup_order", "arguments": {}}, (),
         (Status.DECIDED, False, "unknown_tool", "UNKNOWN_TOOL")),
    ],
)  # fmt: skip
def test_call_valid_labels(call: Any, catalog: Any, expected: tuple[Any, ...]) -> None:
    """Valid, tool not in the catalog, arguments failing the schema or not an object, bad schema."""
    assert _valid(call, catalog) == expected


def test_call_valid_evidence_names_keywords_never_values() -> None:
    """A schema mismatch counts violations and names the failing keywords, not the arguments."""
    call = {"name": "lookup_order", "arguments": {"order_id": 4242424242}}
    report, _ = _evaluate([CallValid()], make_trace(proposed_call=call, available_tools=[LOOKUP]))
    evidence = thaw(report.result("call_valid").evidence)
    assert evidence == {"violations": 1, "keywords": ["type"]}


def test_call_valid_uses_the_catalog_available_at_the_calls_position(tmp_path: Path) -> None:
    """cancel_order is offered only to the second model call: valid there, unknown before it."""
    lookup, cancel = _snapshots(tmp_path, "tool_call")
    assert [t.name for t in lookup.tools or ()] == ["lookup_order"]
    report, _ = _evaluate([CallValid()], cancel.trace())
    assert report.result("call_valid").label == "valid"
    early = lookup.trace().with_field("proposed_call", {"name": "cancel_order", "arguments": {}})
    report, _ = _evaluate([CallValid()], early)
    assert report.result("call_valid").reason == "UNKNOWN_TOOL"


# --- tool_execution ------------------------------------------------------------------------------


def _call(call_id: str, **result: Any) -> dict[str, Any]:
    return {"id": call_id, "name": "lookup_order", "arguments": {}, **result}


def test_tool_execution_labels_each_call_ok_error_or_no_result() -> None:
    """Per call ok / error / no_result in the evidence; the worst label is the result's."""
    calls = [
        _call("a", result="x", result_state="SUCCESS"),
        _call("b", result="y", result_state="UNKNOWN"),
        _call("c", result="boom", result_state="ERROR"),
        _call("d"),
    ]
    report, judge = _evaluate([ToolExecution()], make_trace(tool_calls=calls))
    assert (report.requests, judge.requests) == (0, [])
    result = report.result("tool_execution")
    evidence = thaw(result.evidence)
    assert [c["label"] for c in evidence["calls"]] == ["ok", "ok", "error", "no_result"]
    assert (evidence["ok"], evidence["error"], evidence["no_result"]) == (2, 1, 1)
    assert (result.status, result.label, result.reason) == (Status.DECIDED, "error", "CALL_ERROR")
    assert (result.score, result.passed) == (0.5, False)
    assert "boom" not in json.dumps(evidence)  # labels only, never the result text


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([_call("a", result="x")], (Status.DECIDED, "ok", "ALL_OK", True)),
        ([_call("a", result="x"), _call("b")], (Status.DECIDED, "no_result", "NO_RESULT", False)),
        ([], (Status.SKIPPED, None, "NO_TOOL_CALLS", None)),
    ],
)
def test_tool_execution_outcomes(calls: list[Any], expected: tuple[Any, ...]) -> None:
    """All ok passes; a missing result is no_result; a window without calls is SKIPPED."""
    report, _ = _evaluate([ToolExecution()], make_trace(tool_calls=calls))
    result = report.result("tool_execution")
    assert (result.status, result.label, result.reason, result.passed) == expected


def test_tool_execution_on_an_invocation_snapshot(tmp_path: Path) -> None:
    """The lookup returned (ok), the cancel failed (error): recorded apart from tool_choice."""
    (invocation,) = _snapshots(tmp_path, "invocation")
    report, _ = _evaluate([ToolExecution()], invocation.trace())
    calls = thaw(report.result("tool_execution").evidence)["calls"]
    assert [(c["id"], c["label"]) for c in calls] == [("c1", "ok"), ("c2", "error")]


def test_a_dangling_call_makes_the_snapshot_incomplete(tmp_path: Path) -> None:
    """A snapshot whose call has no result is INCOMPLETE_TRACE for every metric (JEV rule)."""
    record = orders_record()
    del record["fields"]["tool_calls"][1]["result"]
    record["fields"]["messages"].pop()  # the agent never answered
    (invocation,) = _snapshots(tmp_path, "invocation", record)
    report, _ = _evaluate([ToolExecution()], invocation.trace())
    assert report.result("tool_execution").reason == "INCOMPLETE_TRACE"


# --- sessions and metric sets ------------------------------------------------------------------


def test_a_session_judges_its_first_request_and_keeps_the_last(tmp_path: Path) -> None:
    """request is the session's first user request; last_request is the latest one."""
    record = {
        "id": "two-turns",
        "messages": [
            {"role": "user", "content": "Where is order 42?"},
            {"role": "assistant", "content": "On its way."},
            {"role": "user", "content": "And order 43?"},
            {"role": "assistant", "content": "Delivered."},
        ],
    }
    (session,) = _snapshots(tmp_path, "session", record)
    fields = session.trace().fields
    assert (fields["request"], fields["last_request"]) == ("Where is order 42?", "And order 43?")
    _, second = _snapshots(tmp_path, "invocation", record)
    assert second.trace().fields["request"] == "And order 43?"  # invocations are unchanged
    assert "last_request" not in second.trace().fields


def test_tool_call_units_default_to_the_tool_call_set() -> None:
    """The default name stands for tool_call on a tool_call unit; a named set is kept."""
    assert set_for_unit("agent", "tool_call") == "tool_call"
    assert set_for_unit("agent+trajectory", "tool_call") == "agent+trajectory"
    assert set_for_unit("agent", "invocation") == "agent"
    assert set_for_unit("agent", "session") == "agent"


def test_the_tool_call_and_agent_sets() -> None:
    """tool_call holds the two pre-call metrics; agent ends with tool_execution."""
    args: dict[str, Any] = {"thresholds": THRESHOLDS, "judge": "synthetic", "limits": Limits()}
    assert build_metric_set("tool_call", **args).metric_ids == ("call_appropriate", "call_valid")
    agent = build_metric_set("agent", **args).metric_ids
    assert agent[-1] == "tool_execution"
    assert len(agent) == 8
