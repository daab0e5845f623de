"""LangSmith run trees, from runs the real ``langsmith`` client exported (GENERATED fixture).

``langsmith.jsonl`` is written by ``gen_langsmith`` in tests/fixtures/generate.py: a
langchain-openai tool loop traced by langsmith 0.15.1 / langchain-core 1.8.3, captured by a fake
LangSmith endpoint on 127.0.0.1 (multipart ingestion folded back into post/patch batches).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import ImportErrorReport, read_snapshots
from producer.snapshot import EventType, Snapshot

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]


def _by_thread(path: Path, **options: Any) -> dict[str | None, list[Snapshot]]:
    table: dict[str | None, list[Snapshot]] = {}
    for snapshot in read_snapshots(path, **options):
        table.setdefault(snapshot.session_id, []).append(snapshot)
    return table


def _runs_of(lines: list[dict[str, Any]], thread: str) -> list[dict[str, Any]]:
    """The runs (post entries) of one thread's traces, copied."""
    runs = [run for line in lines for run in line.get("post", []) + line.get("patch", [])]
    ids = {
        r["trace_id"]
        for r in runs
        if (r.get("extra") or {}).get("metadata", {}).get("thread_id") == thread
    }
    return copy.deepcopy([r for r in runs if r["trace_id"] in ids])


def test_client_batches_make_one_trace_per_root(traces: Path) -> None:
    """The client's batches give the weather trace with catalog, thread id and run times."""
    report = ImportErrorReport()
    (weather,) = _by_thread(traces / "langsmith.jsonl", report=report)["thread-weather"]
    assert weather.source == "langsmith"
    assert [t.name for t in weather.tools or ()] == ["get_weather"]
    assert all(e.timestamp is not None for e in weather.events)
    assert weather.trace().issues == ()
    assert report.rejected == []
    assert report.not_ready == []


def test_root_that_never_ended_is_an_incomplete_snapshot(traces: Path) -> None:
    """An export taken mid-run (root and tool run never patched) is visible, not 'not ready'."""
    report = ImportErrorReport()
    (pending,) = _by_thread(traces / "langsmith.jsonl", report=report)["thread-pending"]
    assert report.not_ready == []
    assert pending.events[-1].type is EventType.TOOL_CALL  # the open tool run gave no result
    issues = pending.trace().issues
    assert "RUN_NOT_ENDED" in issues
    assert "PENDING_TOOL_CALL" in issues


def test_model_call_that_never_returned_is_flagged(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A crash inside the model call: an empty assistant event flagged RUN_NOT_ENDED."""
    runs = _runs_of(fixture_lines("langsmith.jsonl"), "thread-pending")
    for run in runs:
        if run["run_type"] == "llm":
            run.pop("end_time", None)
            run.pop("outputs", None)
    runs = [r for r in runs if r["run_type"] != "tool"]
    (snapshot,) = read_snapshots(write_jsonl([{"post": runs}]))
    last = snapshot.events[-1]
    assert (last.type, last.text, last.issues) == (EventType.ASSISTANT, None, ("RUN_NOT_ENDED",))
    assert "RUN_NOT_ENDED" in snapshot.trace().issues


def test_root_alone_gives_its_request(fixture_lines: Lines, write_jsonl: Writer) -> None:
    """Only the root was sent before the crash: its text input is the request, incomplete."""
    runs = _runs_of(fixture_lines("langsmith.jsonl"), "thread-pending")
    (root,) = [r for r in runs if r.get("parent_run_id") is None]
    report = ImportErrorReport()
    (snapshot,) = read_snapshots(write_jsonl([{"post": [root]}]), report=report)
    assert [(e.type, e.text) for e in snapshot.events[:1]] == [
        (EventType.USER, "Book a table for two at Da Enzo in Rome tonight.")
    ]
    assert "RUN_NOT_ENDED" in snapshot.trace().issues
    assert report.not_ready == []


def test_ended_root_without_content_is_still_not_ready(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A finished chain with no model call has nothing to judge: NO_CONTENT, as before."""
    runs = _runs_of(fixture_lines("langsmith.jsonl"), "thread-weather")
    (root,) = [r for r in runs if r.get("parent_run_id") is None]
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([{"post": [root]}]), report=report)) == []
    assert [n.code for n in report.not_ready] == ["NO_CONTENT"]


def test_handled_tool_error_is_an_error_result(traces: Path) -> None:
    """handle_tool_error: the ToolMessage's status error makes the history's result an error."""
    (snapshot,) = _by_thread(traces / "langsmith.jsonl")["thread-tool_error"]
    (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert (result.text, result.status) == ("city not found", "error")


def test_tool_runs_answer_calls_the_history_does_not(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """Without the final model call, results come from the tool runs (by extra.tool_call_id)."""
    runs = _runs_of(fixture_lines("langsmith.jsonl"), "thread-weather")
    llms = sorted((r for r in runs if r["run_type"] == "llm"), key=lambda r: r["dotted_order"])
    runs.remove(llms[-1])
    (snapshot,) = read_snapshots(write_jsonl([{"post": runs}]))
    results = {e.call_id: e.text for e in snapshot.events if e.type is EventType.TOOL_RESULT}
    assert set(results) == {"call_A1", "call_B2"}
    assert "PENDING_TOOL_CALL" not in snapshot.trace().issues


def test_catalog_is_tri_state(traces: Path) -> None:
    """No bound tools → catalog not recorded; bind_tools([]) → recorded empty."""
    table = _by_thread(traces / "langsmith.jsonl")
    assert table["thread-no_tools"][0].tools is None
    assert table["thread-empty_tools"][0].tools == ()


def test_thread_turns_are_one_session(traces: Path) -> None:
    """Each turn is its own root run; the thread's session holds both turns once."""
    turns = _by_thread(traces / "langsmith.jsonl")["thread-refund"]
    assert [s.events[s.events.index(_user(s))].text for s in turns] == [
        "Please refund order 1001, it arrived broken.",
        "Why was my refund reversed?",
    ]
    (session,) = _by_thread(traces / "langsmith.jsonl", unit="session")["thread-refund"]
    users = [e.text for e in session.events if e.type is EventType.USER]
    assert len(users) == 2


def _user(snapshot: Snapshot) -> Any:
    return next(e for e in snapshot.events if e.id == snapshot.unit.event_id)
