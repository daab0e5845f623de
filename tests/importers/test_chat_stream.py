"""Streamed Chat Completions (GENERATED fixture ``openai_stream.jsonl``: the openai SDK's own
``ChatCompletionChunk.to_dict()`` of streams from the fake model server, gen_openai_stream)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import ImportErrorReport, read_snapshots
from producer.snapshot import EventType, Snapshot
from worker.canonical_json import thaw

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]
Sigs = Callable[[Any], list[Any]]


def _one(path: Path, trace_id: str, **options: Any) -> Snapshot:
    return next(s for s in read_snapshots(path, **options) if s.trace_id == trace_id)


def _line(lines: list[dict[str, Any]], trace_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(line for line in lines if line["id"] == trace_id))


def test_stream_assembles_into_the_non_streamed_trace(traces: Path, signatures: Sigs) -> None:
    """The streamed final turn gives the same events as the logged non-streamed run."""
    streamed = _one(traces / "openai_stream.jsonl", "stream-weather")
    reference = _one(traces / "openai_chat.jsonl", "chat-weather")
    assert streamed.source == "chat_stream"
    assert signatures(streamed.events) == signatures(reference.events)
    assert streamed.events[-1].timestamp is not None  # the first chunk's ``created``


def test_tool_call_fragments_join_by_index(traces: Path) -> None:
    """Argument pieces of two parallel calls join per index into the calls the model made."""
    streamed = _one(traces / "openai_stream.jsonl", "stream-weather-calls")
    reference = _one(traces / "openai_chat.jsonl", "chat-weather")
    got = [
        (e.call_id, e.tool_name, thaw(e.arguments))
        for e in streamed.events
        if e.type is EventType.TOOL_CALL
    ]
    want = [
        (e.call_id, e.tool_name, thaw(e.arguments))
        for e in reference.events
        if e.type is EventType.TOOL_CALL
    ]
    assert (
        got
        == want
        == [
            ("call_A1", "get_weather", {"city": "Paris"}),
            ("call_B2", "get_weather", {"city": "Rome"}),
        ]
    )
    preamble = next(e for e in streamed.events if e.type is EventType.ASSISTANT)
    assert preamble.text == "I'll check both cities."


def test_interleaved_fragments_give_the_same_calls(
    fixture_lines: Lines, write_jsonl: Writer, traces: Path, signatures: Sigs
) -> None:
    """Fragments of different indexes may interleave: they are joined by index, not order."""
    line = _line(fixture_lines("openai_stream.jsonl"), "stream-weather-calls")
    calls = [c for c in line["chunks"] if c["choices"][0]["delta"].get("tool_calls")]
    rest = [c for c in line["chunks"] if c not in calls]
    first = [c for c in calls if c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0]
    second = [c for c in calls if c not in first]
    mixed = [c for pair in zip(first, second, strict=False) for c in pair]
    mixed += first[len(second) :] + second[len(first) :]
    line["chunks"] = [*rest[:-1], *mixed, rest[-1]]
    want = signatures(_one(traces / "openai_stream.jsonl", "stream-weather-calls").events)
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert signatures(snapshot.events) == want


def test_stream_cut_before_its_end_is_truncated(fixture_lines: Lines, write_jsonl: Writer) -> None:
    """No finish_reason (the log stopped mid-stream): the answer is TRUNCATED_CONTENT."""
    line = _line(fixture_lines("openai_stream.jsonl"), "stream-weather")
    line["chunks"] = line["chunks"][:-3]
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert "TRUNCATED_CONTENT" in snapshot.events[-1].issues
    assert "TRUNCATED_CONTENT" in snapshot.trace().issues


def test_detected_and_forced_and_response_list(
    fixture_lines: Lines, write_jsonl: Writer, traces: Path, signatures: Sigs
) -> None:
    """format=auto and format="chat_stream" agree; chunks logged under ``response`` also read."""
    auto = [signatures(s.events) for s in read_snapshots(traces / "openai_stream.jsonl")]
    forced = read_snapshots(traces / "openai_stream.jsonl", format="chat_stream")
    assert [signatures(s.events) for s in forced] == auto
    line = _line(fixture_lines("openai_stream.jsonl"), "stream-weather")
    line["response"] = line.pop("chunks")
    (snapshot,) = read_snapshots(write_jsonl([line]))
    assert signatures(snapshot.events) == auto[1]


def test_fragment_without_index_is_rejected_with_its_path(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A tool-call fragment with no index cannot be joined: the line is rejected, named."""
    line = _line(fixture_lines("openai_stream.jsonl"), "stream-pending")
    position = next(
        i for i, c in enumerate(line["chunks"]) if c["choices"][0]["delta"].get("tool_calls")
    )
    del line["chunks"][position]["choices"][0]["delta"]["tool_calls"][0]["index"]
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([line]), report=report)) == []
    (rejected,) = report.rejected
    assert rejected.field == f"chunks[{position}].choices[0].delta.tool_calls[0].index"
    assert rejected.code == "INVALID_FIELD"


def test_raw_event_stream_body_reads_like_the_chunks(
    fixture_lines: Lines, write_jsonl: Writer, signatures: Sigs
) -> None:
    """A gateway's raw SSE body (``data: {...}`` events, ``[DONE]``) gives the same trace."""
    line = _line(fixture_lines("openai_stream.jsonl"), "stream-weather-calls")
    (want,) = read_snapshots(write_jsonl([line]))
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in line.pop("chunks"))
    line["response"] = ": keep-alive\n\n" + body + "data: [DONE]\n\n"
    (got,) = read_snapshots(write_jsonl([line]))
    assert got.source == "chat_stream"
    assert signatures(got.events) == signatures(want.events)
    line["response"] = "data: {not json\n\n"
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([line]), report=report)) == []
    assert [(r.field, r.code) for r in report.rejected] == [("response", "INVALID_FIELD")]
