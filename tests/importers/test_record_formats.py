"""Anthropic, Responses, logged chat exchange and fields JSON importers (real SDK output)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import ImportErrorReport, read_snapshots
from producer.snapshot import EventType, Snapshot

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]


def _one(path: Path, trace_id: str) -> Snapshot:
    (snapshot,) = [s for s in read_snapshots(path) if s.trace_id == trace_id]
    return snapshot


def test_anthropic_error_result_is_a_result(traces: Path) -> None:
    """``is_error`` makes a result with status error, not an issue: the trace stays complete."""
    snapshot = _one(traces / "anthropic.jsonl", "claude-tool_error")
    (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert (result.status, result.text, result.issues) == ("error", "city not found", ())
    trace = snapshot.trace()
    assert trace.issues == ()
    assert trace.fields["tool_calls"][0]["result_state"] == "ERROR"


def test_anthropic_tool_results_are_not_user_turns(traces: Path) -> None:
    """A user message holding only tool_result blocks adds results, not a new invocation."""
    snapshot = _one(traces / "anthropic.jsonl", "claude-weather")
    assert [e.type for e in snapshot.events].count(EventType.USER) == 1
    assert snapshot.tools is not None
    assert snapshot.tools[0].parameters is not None
    assert snapshot.trace().fields["final_answer"].startswith("Paris is 14")


def test_anthropic_image_result_is_flagged(traces: Path) -> None:
    """An image block in a tool result keeps its text and flags UNSUPPORTED_TOOL_CONTENT."""
    snapshot = _one(traces / "anthropic.jsonl", "claude-radar")
    (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert result.text == "Radar for Paris:"
    assert result.issues == ("UNSUPPORTED_TOOL_CONTENT",)
    assert "UNSUPPORTED_TOOL_CONTENT" in snapshot.trace().issues


def test_anthropic_thinking_is_skipped_and_max_tokens_flagged(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """Thinking blocks are never evidence; a reply cut by max_tokens is TRUNCATED_CONTENT."""
    line = copy.deepcopy(fixture_lines("anthropic.jsonl")[0])
    line["response"]["content"].insert(
        0, {"type": "thinking", "thinking": "secret", "signature": "s"}
    )
    line["response"]["stop_reason"] = "max_tokens"
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert "secret" not in str(snapshot.wire())
    assert snapshot.events[-1].issues == ("TRUNCATED_CONTENT",)


def test_responses_pairs_on_call_id(traces: Path) -> None:
    """function_call items pair with outputs on ``call_id`` (``fc_`` item ids are not call ids)."""
    snapshot = _one(traces / "openai_responses.jsonl", "resp-weather")
    calls = [e for e in snapshot.events if e.type is EventType.TOOL_CALL]
    assert [c.call_id for c in calls] == ["call_A1", "call_B2"]
    assert snapshot.events[0].type is EventType.SYSTEM  # the request's instructions
    trace = snapshot.trace()
    assert trace.issues == ()
    assert all(c["result"] for c in trace.fields["tool_calls"])


def test_responses_catalog_comes_from_the_request(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """The echoed ``response.tools`` never replaces what the request offered."""
    line = copy.deepcopy(fixture_lines("openai_responses.jsonl")[0])
    line["response"]["tools"] = [{"type": "function", "name": "delete_account", "parameters": {}}]
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert [t.name for t in snapshot.tools or ()] == ["get_weather"]
    del line["request"]["tools"]
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert snapshot.tools is None


def test_responses_in_progress_is_not_ready(fixture_lines: Lines, write_jsonl: Writer) -> None:
    """A response still in progress is in-flight work: recorded as not ready, no snapshot."""
    line = copy.deepcopy(fixture_lines("openai_responses.jsonl")[0])
    line["response"]["status"] = "in_progress"
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([line]), report=report)) == []
    assert [(n.trace_id, n.code) for n in report.not_ready] == [
        ("resp-weather", "RESPONSE_IN_PROGRESS")
    ]


def test_responses_server_side_history_is_flagged(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """With previous_response_id the history lives on the server: MISSING_HISTORY."""
    line = copy.deepcopy(fixture_lines("openai_responses.jsonl")[0])
    line["request"]["previous_response_id"] = "resp_0001"
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert "MISSING_HISTORY" in snapshot.trace().issues


def test_exchange_takes_history_from_request_and_turn_from_response(traces: Path) -> None:
    """A proxy's request/response pair is the whole trace; the response id names it."""
    snapshots = list(read_snapshots(traces / "chat_exchange.jsonl"))
    weather = snapshots[0]
    assert weather.trace_id == "chatcmpl-0002"
    assert weather.source == "chat_exchange"
    assert weather.events[-1].text == "Paris is 14 °C and cloudy; Rome is 21 °C and sunny."
    assert weather.events[-1].timestamp is not None  # the response's ``created``
    assert weather.trace().issues == ()


def test_exchange_length_cut_and_error_response(fixture_lines: Lines, write_jsonl: Writer) -> None:
    """finish_reason length flags TRUNCATED_CONTENT; an error response is a rejection."""
    cut = copy.deepcopy(fixture_lines("chat_exchange.jsonl")[0])
    cut["response"]["choices"][0]["finish_reason"] = "length"
    error = {"request": cut["request"], "response": {"error": {"message": "overloaded"}}}
    report = ImportErrorReport()
    (snapshot,) = read_snapshots(write_jsonl([cut, error]), report=report)
    assert snapshot.events[-1].issues == ("TRUNCATED_CONTENT",)
    assert [(r.line, r.field, r.code) for r in report.rejected] == [
        (2, "response.error", "ERROR_RESPONSE")
    ]


def test_fields_json_maps_to_events(write_jsonl: Writer) -> None:
    """evalq's fields JSON becomes user/call/result/answer events; trace issues are kept."""
    record = {
        "id": "f1",
        "fields": {
            "request": "Weather in Paris?",
            "final_answer": "14 °C.",
            "tool_calls": [
                {"id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}, "result": "14"}
            ],
            "available_tools": [{"name": "get_weather", "description": "", "parameters": {}}],
            "claims": ["It is 14 °C in Paris."],
        },
        "issues": ["CAPTURE_LIMIT"],
    }
    (snapshot,) = read_snapshots(write_jsonl([record]))
    assert [e.type.value for e in snapshot.events] == [
        "user",
        "assistant",
        "tool_call",
        "tool_result",
        "assistant",
    ]
    assert snapshot.claims == ("It is 14 °C in Paris.",)
    trace = snapshot.trace()
    assert trace.fields["request"] == "Weather in Paris?"
    assert trace.fields["tool_calls"][0]["result"] == "14"
    assert "CAPTURE_LIMIT" in trace.issues


def test_fields_json_with_messages_keeps_positions(write_jsonl: Writer) -> None:
    """With ``messages``, calls follow the message at their message_index."""
    record = {
        "id": "f2",
        "fields": {
            "messages": [
                {"role": "USER", "text": "hi"},
                {"role": "ASSISTANT", "text": ""},
                {"role": "TOOL", "text": "42"},
                {"role": "ASSISTANT", "text": "It is 42."},
            ],
            "tool_calls": [
                {
                    "id": "c1",
                    "name": "f",
                    "arguments": {},
                    "message_index": 1,
                    "result": "42",
                    "result_message_index": 2,
                    "result_state": "SUCCESS",
                }
            ],
        },
    }
    (snapshot,) = read_snapshots(write_jsonl([record]))
    kinds = [e.type.value for e in snapshot.events]
    assert kinds == ["user", "assistant", "tool_call", "tool_result", "assistant"]
    assert snapshot.events[3].status == "success"
    assert snapshot.trace().fields["final_answer"] == "It is 42."
