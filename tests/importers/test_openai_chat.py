"""OpenAI Chat Completions importer on histories logged from the real ``openai`` SDK."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import read_snapshots
from producer.snapshot import EventType, Snapshot
from worker.canonical_json import thaw

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]


def _by_id(path: Path, trace_id: str) -> list[Snapshot]:
    return [s for s in read_snapshots(path) if s.trace_id == trace_id]


def test_parallel_calls_pair_by_id_not_position(traces: Path) -> None:
    """Results appended in reverse order still pair with their own calls."""
    (snapshot,) = _by_id(traces / "openai_chat.jsonl", "chat-weather")
    calls = {e.call_id: e for e in snapshot.events if e.type is EventType.TOOL_CALL}
    results = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert [r.call_id for r in results] == ["call_B2", "call_A1"]
    assert thaw(calls["call_A1"].arguments) == {"city": "Paris"}
    assert "14" in (results[1].text or "")
    assert results[1].tool_name == "get_weather"
    tool_calls = snapshot.trace().fields["tool_calls"]
    paris = next(c for c in tool_calls if c["id"] == "call_A1")
    assert "14" in paris["result"]


def test_preamble_is_not_the_final_answer(traces: Path) -> None:
    """The text sent with the calls is an assistant event; the final answer is the last one."""
    (snapshot,) = _by_id(traces / "openai_chat.jsonl", "chat-weather")
    assistants = [e for e in snapshot.events if e.type is EventType.ASSISTANT]
    parents = {e.parent_id for e in snapshot.events if e.type is EventType.TOOL_CALL}
    assert assistants[0].text == "I'll check both cities."
    assert assistants[0].id in parents
    assert snapshot.trace().fields["final_answer"].startswith("Paris is 14")


def test_catalog_is_tri_state(traces: Path, fixture_lines: Lines, write_jsonl: Writer) -> None:
    """No ``tools`` key → None, ``tools: []`` → empty tuple, a list → the offered tools."""
    by_trace = {s.trace_id: s for s in read_snapshots(traces / "openai_chat.jsonl")}
    assert by_trace["chat-no_tools"].tools is None
    assert [t.name for t in by_trace["chat-weather"].tools or ()] == ["get_weather"]
    line = copy.deepcopy(fixture_lines("openai_chat.jsonl")[3])
    line["tools"] = []
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert snapshot.tools == ()
    assert snapshot.trace().fields["available_tools"] == ()


def test_record_extras_ride_along(traces: Path) -> None:
    """metadata, labels and expected_tool_calls reach the snapshot; labels never the trace."""
    (snapshot,) = _by_id(traces / "openai_chat.jsonl", "chat-weather")
    assert snapshot.slice.agent_version == "weather-1.4"
    assert snapshot.slice.environment == "prod"
    assert snapshot.labels["tool_choice"].label == "correct"
    assert len(snapshot.expected_tool_calls or ()) == 2
    assert "labels" not in snapshot.trace().fields
    assert snapshot.source == "openai_chat"


def test_finished_log_ending_in_a_call_still_yields(traces: Path) -> None:
    """A log that ends with an unanswered call gives a snapshot whose trace is incomplete."""
    (snapshot,) = _by_id(traces / "openai_chat.jsonl", "chat-pending")
    assert snapshot.events[-1].type is EventType.TOOL_CALL
    assert "PENDING_TOOL_CALL" in snapshot.trace().issues


def test_unicode_is_kept(traces: Path) -> None:
    """Non-ASCII text and emoji survive import unchanged."""
    (snapshot,) = _by_id(traces / "openai_chat.jsonl", "chat-unicode")
    assert snapshot.events[1].text == "Wetter in München? 🌦"
    assert thaw(snapshot.events[3].arguments) == {"city": "München"}


def test_result_without_call_is_flagged(write_jsonl: Writer) -> None:
    """A tool message naming no earlier call keeps UNPAIRED_TOOL_RESULT (trace incomplete)."""
    record = {
        "id": "orphan",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_X", "content": "42"},
            {"role": "assistant", "content": "done"},
        ],
    }
    (snapshot,) = read_snapshots(write_jsonl([record]))
    assert snapshot.events[1].issues == ("UNPAIRED_TOOL_RESULT",)
    assert snapshot.trace().issues


def test_missing_call_id_and_legacy_functions_are_flagged(write_jsonl: Writer) -> None:
    """Calls without an id (incl. the deprecated function_call) are AMBIGUOUS_CALL_ID."""
    record = {
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "f", "arguments": "{}"},
            },
            {"role": "function", "name": "f", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ]
    }
    (snapshot,) = read_snapshots(write_jsonl([record]))
    assert snapshot.events[2].issues == ("AMBIGUOUS_CALL_ID",)
    assert snapshot.events[3].issues == ("UNPAIRED_TOOL_RESULT",)
    assert snapshot.trace_id.startswith("trace-")  # no id in the record: a content digest


def test_non_text_content_is_flagged(write_jsonl: Writer) -> None:
    """An image part in a user message adds UNSUPPORTED_MESSAGE_CONTENT; its text is kept."""
    record = {
        "id": "img",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ],
            },
            {"role": "assistant", "content": "A cat."},
        ],
    }
    (snapshot,) = read_snapshots(write_jsonl([record]))
    assert snapshot.events[0].text == "What is this?"
    assert snapshot.events[0].issues == ("UNSUPPORTED_MESSAGE_CONTENT",)


def test_invalid_argument_json_is_kept_raw(write_jsonl: Writer) -> None:
    """Cut argument strings are never repaired: the raw string is the event's arguments."""
    record = {
        "id": "cut",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": '},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
            {"role": "assistant", "content": "done"},
        ],
    }
    (snapshot,) = read_snapshots(write_jsonl([record]))
    assert snapshot.events[2].arguments == '{"a": '


def test_same_file_gives_same_snapshot_ids(traces: Path) -> None:
    """Import is deterministic: two reads give identical content-addressed ids."""
    first = [s.snapshot_id for s in read_snapshots(traces / "openai_chat.jsonl")]
    second = [s.snapshot_id for s in read_snapshots(traces / "openai_chat.jsonl")]
    assert first == second
    assert len(set(first)) == len(first)
