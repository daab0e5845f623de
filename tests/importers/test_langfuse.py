"""Langfuse exports (GENERATED fixture ``langfuse.jsonl``: the langfuse SDK's real OTLP ingestion
payloads, captured by a fake Langfuse endpoint on 127.0.0.1 and mapped to the export's trace and
``ObservationV2`` shape by gen_langfuse in tests/fixtures/generate.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import ImportErrorReport, read_snapshots
from producer.snapshot import EventType, Snapshot

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]
Sigs = Callable[[Any], list[Any]]


def _by_session(path: Path, **options: Any) -> dict[str | None, list[Snapshot]]:
    table: dict[str | None, list[Snapshot]] = {}
    for snapshot in read_snapshots(path, **options):
        table.setdefault(snapshot.session_id, []).append(snapshot)
    return table


def _trace(lines: list[dict[str, Any]], session: str) -> dict[str, Any]:
    return copy.deepcopy(next(t for t in lines if t.get("sessionId") == session))


def test_trace_export_reads_into_the_chat_events(traces: Path, signatures: Sigs) -> None:
    """GENERATION inputs/outputs give the weather run's events, catalog and session."""
    (weather,) = _by_session(traces / "langfuse.jsonl")["lf-weather"]
    reference = next(
        s for s in read_snapshots(traces / "openai_chat.jsonl") if s.trace_id == "chat-weather"
    )
    assert weather.source == "langfuse"
    assert [t.name for t in weather.tools or ()] == ["get_weather"]
    assert signatures(weather.events) == signatures(reference.events)
    assert all(e.timestamp is not None for e in weather.events)


def test_session_traces_are_imported_once(traces: Path) -> None:
    """Turn 2's trace repeats turn 1's history: each turn is one invocation."""
    turns = _by_session(traces / "langfuse.jsonl")["lf-refund"]
    users = [next(e.text for e in s.events if e.id == s.unit.event_id) for s in turns]
    assert users == ["Please refund order 1001, it arrived broken.", "Why was my refund reversed?"]


def test_tool_observation_level_error_makes_an_error_result(traces: Path) -> None:
    """The TOOL observation (same name, same input as the call) says the tool failed."""
    (snapshot,) = _by_session(traces / "langfuse.jsonl")["lf-tool_error"]
    (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert (result.text, result.status) == ("city not found", "error")


def test_tool_observations_answer_calls_the_history_does_not(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """Without the last generation, TOOL observations tied by name+input give the results."""
    trace = _trace(fixture_lines("langfuse.jsonl"), "lf-weather")
    last = [o for o in trace["observations"] if o["type"] == "GENERATION"][-1]
    trace["observations"].remove(last)
    (snapshot,) = read_snapshots(write_jsonl([trace]))
    results = {e.call_id: e.text for e in snapshot.events if e.type is EventType.TOOL_RESULT}
    assert results == {
        "call_A1": '{"temp_c": 14, "summary": "cloudy"}',
        "call_B2": '{"temp_c": 21, "summary": "sunny"}',
    }


def test_untied_tool_observation_is_never_paired_by_position(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A TOOL observation whose input matches no call exactly answers nothing."""
    trace = _trace(fixture_lines("langfuse.jsonl"), "lf-weather")
    last = [o for o in trace["observations"] if o["type"] == "GENERATION"][-1]
    trace["observations"].remove(last)
    for obs in trace["observations"]:
        if obs["type"] == "TOOL":
            obs["input"] = {"city": "somewhere"}
    (snapshot,) = read_snapshots(write_jsonl([trace]))
    assert not [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert "PENDING_TOOL_CALL" in snapshot.trace().issues


def test_catalog_is_tri_state(fixture_lines: Lines, write_jsonl: Writer, traces: Path) -> None:
    """``input.tools: []`` is an empty catalog; a plain messages input records none."""
    (empty,) = _by_session(traces / "langfuse.jsonl")["lf-empty_tools"]
    assert empty.tools == ()
    trace = _trace(fixture_lines("langfuse.jsonl"), "lf-empty_tools")
    for obs in trace["observations"]:
        if obs["type"] == "GENERATION":
            obs["input"] = obs["input"]["messages"]
    (absent,) = read_snapshots(write_jsonl([trace]))
    assert absent.tools is None


def test_parent_that_never_ended_makes_the_trace_incomplete(traces: Path) -> None:
    """The agent crashed: its observation never reached Langfuse, the generation is orphaned."""
    (pending,) = _by_session(traces / "langfuse.jsonl")["lf-pending"]
    assert pending.events[-1].type is EventType.TOOL_CALL
    issues = pending.trace().issues
    assert "MISSING_PARENT_SPAN" in issues
    assert "PENDING_TOOL_CALL" in issues


def test_observation_pages_read_like_the_trace_export(
    fixture_lines: Lines, write_jsonl: Writer, traces: Path, signatures: Sigs
) -> None:
    """``/api/public/v2/observations`` pages (a trace split over lines) give the same events."""
    lines = fixture_lines("langfuse.jsonl")
    observations = [o for t in lines for o in t["observations"]]
    pages = [
        {"data": observations[i : i + 7], "meta": {"cursor": str(i)}}
        for i in range(0, len(observations), 7)
    ]
    want = sorted(str(signatures(s.events)) for s in read_snapshots(traces / "langfuse.jsonl"))
    for fmt in ("auto", "langfuse"):
        got = read_snapshots(write_jsonl(pages), format=fmt)
        assert sorted(str(signatures(s.events)) for s in got) == want


def test_generation_without_messages_is_rejected_with_its_path(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A GENERATION input that is not chat messages is a named rejection, not a crash."""
    trace = _trace(fixture_lines("langfuse.jsonl"), "lf-empty_tools")
    generation = next(o for o in trace["observations"] if o["type"] == "GENERATION")
    generation["input"] = 42
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([trace]), report=report)) == []
    (rejected,) = report.rejected
    assert (rejected.field, rejected.code) == (
        f"observations[{generation['id']}].input",
        "INVALID_FIELD",
    )
