"""LangSmith run trees (hand-written fixture: see gen_langsmith in tests/fixtures/generate.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import ImportErrorReport, read_snapshots
from producer.snapshot import EventType

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]


def test_post_and_patch_batches_make_one_trace(traces: Path) -> None:
    """POSTed runs completed by PATCHes give one trace with catalog, thread and times."""
    report = ImportErrorReport()
    (snapshot,) = read_snapshots(traces / "langsmith.jsonl", report=report)
    assert snapshot.source == "langsmith"
    assert snapshot.session_id == "thread-weather"
    assert [t.name for t in snapshot.tools or ()] == ["get_weather"]
    assert all(e.timestamp is not None for e in snapshot.events)
    assert snapshot.trace().issues == ()
    assert [(n.line, n.code) for n in report.not_ready] == [(3, "RUN_NOT_ENDED")]


def test_tool_run_error_status_is_an_error_result(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """handle_tool_error: error=None but ToolMessage status error → an error result."""
    post, patch, _ = copy.deepcopy(fixture_lines("langsmith.jsonl"))
    llm = post["post"][4]  # drop the final model call: results then come from the tool runs
    post["post"].remove(llm)
    patch["patch"] = [p for p in patch["patch"] if p["id"] != llm["id"]]
    tool_patch = next(
        p
        for p in patch["patch"]
        if p["outputs"].get("output", {}).get("kwargs", {}).get("tool_call_id") == "call_A1"
    )
    tool_patch["outputs"]["output"]["kwargs"]["status"] = "error"
    (snapshot,) = read_snapshots(write_jsonl([post, patch]))
    results = {e.call_id: e for e in snapshot.events if e.type is EventType.TOOL_RESULT}
    assert results["call_A1"].status == "error"
    assert results["call_B2"].status is None
    assert "PENDING_TOOL_CALL" not in snapshot.trace().issues
