"""Units and evidence windows: invocation, session, tool_call, through_event, hindsight."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from producer import read_snapshots
from producer._reader import ImportErrorReport
from producer.snapshot import EventType, Snapshot, WindowRule
from worker.canonical_json import canonical_json
from worker.evaluation import Evaluator, Limits, Thresholds, agent_metrics
from worker.judges import JudgeRequest, JudgeResponse, SyntheticJudge

Writer = Callable[[list[Any]], Path]
REVERSAL = "reversed by the bank"


def _refund(traces: Path, unit: str, **options: Any) -> list[Snapshot]:
    path = traces / "openai_chat.jsonl"
    return [s for s in read_snapshots(path, unit=unit, **options) if s.trace_id == "chat-refund"]


def _texts(snapshot: Snapshot) -> str:
    return json.dumps(snapshot.wire(), ensure_ascii=False)


def test_invocation_is_user_message_through_final_answer(traces: Path) -> None:
    """Each user turn gives one snapshot ending at its final answer (rule invocation_end)."""
    first, second = _refund(traces, "invocation")
    assert first.unit.kind.value == "invocation"
    assert first.window.rule is WindowRule.INVOCATION_END
    assert first.events[-1].text == "Done: refund R-1 of $40.00 for order 1001 was issued."
    assert first.window.cutoff_event_id == first.events[-1].id
    assert first.unit.event_id == first.events[1].id
    assert first.events[1].type is EventType.USER
    assert second.events[1].text == "Why was my refund reversed?"
    assert [e.type for e in second.events].count(EventType.USER) == 1


def test_hindsight_never_reaches_an_invocation_snapshot(traces: Path) -> None:
    """The reversal note after turn 1's answer is in the session, never in an invocation."""
    (session,) = _refund(traces, "session")
    assert REVERSAL in _texts(session)  # the evidence really is in the file
    for snapshot in _refund(traces, "invocation"):
        assert REVERSAL not in _texts(snapshot)
        assert REVERSAL not in canonical_json(snapshot.trace().fields)
        snapshot.check_window()


def test_hindsight_never_reaches_a_judge_request(traces: Path) -> None:
    """Evaluating turn 1 with all agent metrics sends nothing said after its cutoff."""
    sent: list[str] = []
    synthetic = SyntheticJudge()

    async def recording(request: JudgeRequest) -> JudgeResponse:
        sent.append(json.dumps(request.wire(), ensure_ascii=False))
        return await synthetic(request)

    first = _refund(traces, "invocation")[0]
    evaluator = Evaluator(recording, agent_metrics(Thresholds(0.3, 0.7)), Limits())
    asyncio.run(evaluator.evaluate(first.trace()))
    assert sent, "the metrics asked the judge nothing"
    assert all(REVERSAL not in body and "ticket T-7" not in body for body in sent)
    assert any("Please refund order 1001" in body for body in sent)


def test_session_keeps_every_turn(traces: Path) -> None:
    """The session snapshot holds all events and judges the last user turn."""
    (session,) = _refund(traces, "session")
    assert session.window.rule is WindowRule.SESSION_END
    assert session.session_id == "sess-refund-1001"
    users = [e for e in session.events if e.type is EventType.USER]
    assert len(users) == 2
    assert session.unit.event_id == users[-1].id
    assert session.window.cutoff_event_id == session.events[-1].id


def test_tool_call_window_ends_before_the_call(traces: Path) -> None:
    """One snapshot per call; the call, its siblings and its result are all outside."""
    path = traces / "openai_chat.jsonl"
    weather = [s for s in read_snapshots(path, unit="tool_call") if s.trace_id == "chat-weather"]
    assert len(weather) == 2
    for snapshot in weather:
        assert snapshot.window.rule is WindowRule.BEFORE_TOOL_CALL
        assert snapshot.unit.kind.value == "tool_call"
        ids = {e.id for e in snapshot.events}
        assert snapshot.unit.event_id not in ids
        assert all(e.type in (EventType.SYSTEM, EventType.USER) for e in snapshot.events)
        assert "14" not in _texts(snapshot)
        assert not snapshot.trace().issues
    assert weather[0].unit.event_id != weather[1].unit.event_id
    assert weather[0].snapshot_id != weather[1].snapshot_id


def test_tool_call_window_keeps_earlier_steps(write_jsonl: Writer) -> None:
    """A second step's call sees the first step's call and result, not its own step."""
    messages = [
        {"role": "user", "content": "plan"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "a")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "assistant", "content": "next", "tool_calls": [_call("c2", "b")]},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {"role": "assistant", "content": "done"},
    ]
    first, second = read_snapshots(
        write_jsonl([{"id": "t", "messages": messages}]), unit="tool_call"
    )
    assert [e.type for e in first.events] == [EventType.USER]
    assert second.unit.event_id == "t:5"
    assert [e.id for e in second.events] == ["t:0", "t:1", "t:2", "t:3"]
    assert "r2" not in _texts(second)


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_through_event_cuts_at_the_named_event(traces: Path) -> None:
    """An explicit cutoff includes that event and nothing after it (rule through_event)."""
    report = ImportErrorReport()
    path = traces / "openai_chat.jsonl"
    snapshots = list(
        read_snapshots(path, unit="through_event", cutoff_event_id="chat-weather:4", report=report)
    )
    (snapshot,) = snapshots
    assert snapshot.window.rule is WindowRule.THROUGH_EVENT
    assert snapshot.events[-1].id == "chat-weather:4"
    assert snapshot.unit.event_id == "chat-weather:1"
    assert report.not_ready_count == 4  # the other traces do not hold that event
    assert {n.code for n in report.not_ready} == {"CUTOFF_NOT_FOUND"}


def test_through_event_requires_its_option(traces: Path) -> None:
    """``through_event`` without a cutoff (or a cutoff with another unit) is a usage error."""
    with pytest.raises(ValueError, match="cutoff_event_id"):
        list(read_snapshots(traces / "openai_chat.jsonl", unit="through_event"))
    with pytest.raises(ValueError, match="unknown unit"):
        list(read_snapshots(traces / "openai_chat.jsonl", unit="turn"))


def test_late_result_after_the_answer_is_hindsight(write_jsonl: Writer) -> None:
    """A result arriving after the final answer is outside the invocation window."""
    messages = [
        {"role": "user", "content": "refund please"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "refund")]},
        {"role": "assistant", "content": "Refund issued."},
        {"role": "tool", "tool_call_id": "c1", "content": "REVERSED"},
    ]
    (snapshot,) = read_snapshots(write_jsonl([{"id": "late", "messages": messages}]))
    assert snapshot.events[-1].text == "Refund issued."
    assert "REVERSED" not in _texts(snapshot)
    assert "PENDING_TOOL_CALL" in snapshot.trace().issues  # the agent answered before the result


def test_cutoff_time_is_the_latest_included_time(traces: Path) -> None:
    """Timed events give a cutoff time no included event exceeds (the worker re-checks)."""
    for snapshot in read_snapshots(traces / "otel_genai.jsonl"):
        stamps = [e.timestamp for e in snapshot.events if e.timestamp is not None]
        assert snapshot.window.cutoff_time == max(stamps)
        snapshot.check_window()


def test_unanswered_user_turn_is_not_ready(write_jsonl: Writer) -> None:
    """A log whose only user message has no agent response yet gives no snapshot."""
    report = ImportErrorReport()
    path = write_jsonl([{"id": "wait", "messages": [{"role": "user", "content": "hello?"}]}])
    assert list(read_snapshots(path, report=report)) == []
    assert [(n.trace_id, n.code, n.line) for n in report.not_ready] == [
        ("wait", "NO_INVOCATION", 1)
    ]


def test_tool_call_unit_carries_the_proposed_call_without_its_result(traces: Path) -> None:
    """The judged call rides in unit.call and the trace's proposed_call, never as evidence."""
    path = traces / "openai_chat.jsonl"
    weather = [s for s in read_snapshots(path, unit="tool_call") if s.trace_id == "chat-weather"]
    for snapshot in weather:
        call = snapshot.unit.call
        assert call is not None
        assert call.id == snapshot.unit.event_id
        assert call.type is EventType.TOOL_CALL
        assert call.text is None
        fields = snapshot.trace().fields
        assert fields["proposed_call"]["name"] == call.tool_name
        assert "tool_calls" not in fields or call.call_id not in {
            c["id"] for c in fields["tool_calls"]
        }
