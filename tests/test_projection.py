"""Snapshot → Trace projection (producer/_projection.py, used by ``Snapshot.trace()``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from producer.snapshot import (
    Event,
    EventType,
    GoldLabel,
    Sampling,
    SliceMeta,
    Snapshot,
    ToolRound,
    ToolSpec,
    Window,
    WindowRule,
    WindowViolation,
)
from worker.evaluation import Trace, canonical_json, thaw

LOOKUP = ToolSpec(
    name="lookup_order",
    description="Look up an order.",
    parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
)
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def ev(event_id: str, kind: EventType, **fields: Any) -> Event:
    return Event(id=event_id, type=kind, **fields)


def order42_events() -> list[Event]:
    return [
        ev("e0", EventType.USER, text="Where is my order 42?"),
        ev("e1", EventType.ASSISTANT),
        ev(
            "e2",
            EventType.TOOL_CALL,
            tool_name="lookup_order",
            call_id="call_1",
            parent_id="e1",
            arguments={"order_id": 42},
        ),
        ev(
            "e3",
            EventType.TOOL_RESULT,
            tool_name="lookup_order",
            call_id="call_1",
            text="Order 42 shipped yesterday.",
        ),
        ev("e4", EventType.ASSISTANT, text="Order 42 shipped yesterday."),
    ]


def snapshot(events: list[Event], **extra: Any) -> Snapshot:
    window = extra.pop("window", None) or Window(
        rule=WindowRule.INVOCATION_END, cutoff_event_id=events[-1].id
    )
    # labels passed explicitly: the contract's MappingProxyType default cannot be deep-copied by
    # pydantic (reported to the lead); the projection does not depend on it.
    extra.setdefault("labels", {})
    return Snapshot(trace_id="trace-42", events=tuple(events), window=window, **extra)


def test_order42_projects_like_the_same_chat_messages() -> None:
    """The projected order-42 snapshot equals Trace.from_messages of the equivalent chat."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is my order 42?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": 42}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Order 42 shipped yesterday."},
        {"role": "assistant", "content": "Order 42 shipped yesterday."},
    ]
    tools: list[dict[str, Any]] = [
        {"name": "lookup_order", "description": LOOKUP.description, "parameters": {}}
    ]
    tools[0]["parameters"] = thaw(LOOKUP.parameters)
    expected = Trace.from_messages("trace-42", messages, tools)
    trace = snapshot(order42_events(), tools=(LOOKUP,)).trace()
    assert trace == expected
    assert trace.issues == ()


def test_trace_id_is_the_snapshot_trace_id_and_projection_is_deterministic() -> None:
    """The trace carries the snapshot's trace_id; projecting twice gives equal traces."""
    snap = snapshot(order42_events())
    assert snap.trace().id == "trace-42"
    assert snap.trace() == snap.trace()


def test_calls_attach_to_the_parent_assistant_message() -> None:
    """A tool_call joins the assistant message its parent_id names, even if not the last one."""
    events = [
        ev("u", EventType.USER, text="Check 1 and 2"),
        ev("a", EventType.ASSISTANT, text="Checking."),
        ev("c1", EventType.TOOL_CALL, tool_name="f", call_id="x", parent_id="a"),
        ev("r1", EventType.TOOL_RESULT, tool_name="f", call_id="x", text="one"),
        ev("c2", EventType.TOOL_CALL, tool_name="f", call_id="y", parent_id="a"),
        ev("r2", EventType.TOOL_RESULT, tool_name="f", call_id="y", text="two"),
    ]
    trace = snapshot(events).trace()
    assert [c["message_index"] for c in trace.list("tool_calls")] == [1, 1]
    assert [m["role"] for m in trace.list("messages")] == ["USER", "ASSISTANT", "TOOL", "TOOL"]


def test_call_without_parent_joins_the_immediately_preceding_assistant_message() -> None:
    """Parallel calls without parent_id share the assistant message right before them."""
    events = [
        ev("u", EventType.USER, text="q"),
        ev("a", EventType.ASSISTANT),
        ev("c1", EventType.TOOL_CALL, tool_name="f", call_id="x"),
        ev("c2", EventType.TOOL_CALL, tool_name="g", call_id="y"),
    ]
    trace = snapshot(events).trace()
    assert [(c["name"], c["message_index"]) for c in trace.list("tool_calls")] == [
        ("f", 1),
        ("g", 1),
    ]
    assert trace.issues == ("PENDING_TOOL_CALL",)


def test_call_after_a_result_opens_a_new_assistant_message() -> None:
    """With no assistant message right before it, a call gets its own text-less message."""
    events = [
        ev("u", EventType.USER, text="q"),
        ev("c1", EventType.TOOL_CALL, tool_name="f", call_id="x"),
        ev("r1", EventType.TOOL_RESULT, tool_name="f", call_id="x", text="one"),
        ev("c2", EventType.TOOL_CALL, tool_name="f", call_id="y", parent_id="unknown"),
        ev("r2", EventType.TOOL_RESULT, tool_name="f", call_id="y", text="two"),
    ]
    trace = snapshot(events).trace()
    roles = [m["role"] for m in trace.list("messages")]
    assert roles == ["USER", "ASSISTANT", "TOOL", "ASSISTANT", "TOOL"]
    assert [c["message_index"] for c in trace.list("tool_calls")] == [1, 3]
    assert trace.fields["messages"][3]["text"] == ""


def test_result_name_and_status_reach_the_trace() -> None:
    """tool_result → tool message with name and status (result_state from the status)."""
    events = [
        ev("u", EventType.USER, text="q"),
        ev("c", EventType.TOOL_CALL, tool_name="f", call_id="x"),
        ev("r", EventType.TOOL_RESULT, tool_name="f", call_id="x", text="boom", status="error"),
    ]
    result = snapshot(events).trace().list("tool_results")[0]
    assert (result["result"], result["result_state"], result["result_message_index"]) == (
        "boom",
        "ERROR",
        2,
    )


def test_result_name_differing_from_the_call_is_unpaired() -> None:
    """The tool name of a result is checked against its call (name mismatch → unpaired)."""
    events = [
        ev("u", EventType.USER, text="q"),
        ev("c", EventType.TOOL_CALL, tool_name="f", call_id="x"),
        ev("r", EventType.TOOL_RESULT, tool_name="g", call_id="x", text="r"),
    ]
    assert snapshot(events).trace().issues == ("UNPAIRED_TOOL_RESULT", "PENDING_TOOL_CALL")


def test_parsed_arguments_are_reserialized_and_parsed_back() -> None:
    """A JSON arguments value survives the projection as the same JSON object."""
    args = {"order_id": 42, "flags": [True, 1.5, None], "note": "naïve"}
    events = [
        ev("u", EventType.USER, text="q"),
        ev("c", EventType.TOOL_CALL, tool_name="f", call_id="x", arguments=args),
        ev("r", EventType.TOOL_RESULT, tool_name="f", call_id="x", text="r"),
    ]
    trace = snapshot(events).trace()
    assert thaw(trace.list("tool_calls")[0]["arguments"]) == args
    assert trace.issues == ()


def test_raw_argument_text_is_passed_verbatim_and_flagged() -> None:
    """A raw string (invalid JSON kept by the importer) is flagged INVALID_TOOL_ARGUMENTS."""
    events = [
        ev("u", EventType.USER, text="q"),
        ev("c", EventType.TOOL_CALL, tool_name="f", call_id="x", arguments='{"order_id": 4'),
        ev("r", EventType.TOOL_RESULT, tool_name="f", call_id="x", text="r"),
    ]
    trace = snapshot(events).trace()
    assert trace.issues == ("INVALID_TOOL_ARGUMENTS",)
    assert trace.list("tool_calls")[0]["arguments"] == '{"order_id": 4'


def test_call_without_id_is_an_issue_not_a_crash() -> None:
    """A tool_call event with no call id becomes AMBIGUOUS_CALL_ID in the trace."""
    events = [
        ev("u", EventType.USER, text="q"),
        ev("c", EventType.TOOL_CALL, tool_name="f"),
        ev("a", EventType.ASSISTANT, text="done"),
    ]
    assert snapshot(events).trace().issues == ("AMBIGUOUS_CALL_ID",)


def test_catalog_none_empty_and_given() -> None:
    """tools None → no available_tools; () → present and empty; given → normalized specs."""
    events = order42_events()
    assert "available_tools" not in snapshot(events).trace().fields
    assert snapshot(events, tools=()).trace().fields["available_tools"] == ()
    tools = thaw(snapshot(events, tools=(LOOKUP, ToolSpec(name="x"))).trace().fields)
    assert tools["available_tools"] == [
        {
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": thaw(LOOKUP.parameters),
        },
        {"name": "x", "description": "", "parameters": {}},
    ]


def test_tool_rounds_become_snapshots_at_their_message_index() -> None:
    """Each round is placed at the index of the message that holds its event."""
    cancel = ToolSpec(name="cancel_order")
    rounds = (ToolRound(event_id="e1", tools=(LOOKUP,)), ToolRound(event_id="e4", tools=(cancel,)))
    trace = snapshot(order42_events(), tools=(LOOKUP, cancel), tool_rounds=rounds).trace()
    snaps = thaw(trace.fields["available_tool_snapshots"])
    assert [s["after_message_count"] for s in snaps] == [1, 3]
    assert [[t["name"] for t in s["tools"]] for s in snaps] == [["lookup_order"], ["cancel_order"]]


def test_round_named_by_a_tool_call_event_uses_its_host_message() -> None:
    """A round whose event is a tool call sits at the assistant message holding that call."""
    rounds = (ToolRound(event_id="e2", tools=(LOOKUP,)),)
    trace = snapshot(order42_events(), tool_rounds=rounds).trace()
    assert trace.fields["available_tool_snapshots"][0]["after_message_count"] == 1


def test_no_rounds_means_no_snapshots_field() -> None:
    """Without tool_rounds the trace has no available_tool_snapshots."""
    assert "available_tool_snapshots" not in snapshot(order42_events()).trace().fields


def test_optional_evidence_fields_are_added_when_present() -> None:
    """contexts, claims and expected_tool_calls reach the trace when the snapshot has them."""
    snap = snapshot(
        order42_events(),
        contexts=({"doc": "Shipping policy"},),
        claims=("Order 42 shipped.",),
        expected_tool_calls=(
            "lookup_order",
            {"name": "lookup_order", "arguments": {"order_id": 42}},
        ),
    )
    fields = thaw(snap.trace().fields)
    assert fields["contexts"] == [{"doc": "Shipping policy"}]
    assert fields["claims"] == ["Order 42 shipped."]
    assert fields["expected_tool_calls"] == [
        "lookup_order",
        {"name": "lookup_order", "arguments": {"order_id": 42}},
    ]


def test_optional_evidence_fields_are_absent_otherwise() -> None:
    """Without them the trace has no contexts/claims/expected_tool_calls keys."""
    fields = snapshot(order42_events()).trace().fields
    assert not {"contexts", "claims", "expected_tool_calls"} & set(fields)


def test_event_issues_are_appended_to_trace_issues() -> None:
    """Importer codes on events follow the normalization issues, in event order."""
    events = [
        ev("u", EventType.USER, text="q", issues=("TRUNCATED_CONTENT",)),
        ev("c", EventType.TOOL_CALL, tool_name="f", call_id="x", issues=("INFERRED_PAIRING",)),
    ]
    assert snapshot(events).trace().issues == (
        "PENDING_TOOL_CALL",
        "TRUNCATED_CONTENT",
        "INFERRED_PAIRING",
    )


def test_labels_slices_and_sampling_never_reach_the_trace() -> None:
    """Gold labels, slice metadata and sampling facts are not evidence: never in the trace."""
    snap = snapshot(
        order42_events(),
        labels={"tool_choice": GoldLabel(label="GOLD_SECRET"), "grounded": GoldLabel(passed=True)},
        slice=SliceMeta(agent_version="SLICE_SECRET", environment="ENV_SECRET", tool="TOOL_SECRET"),
        sampling=Sampling(rate=0.5, weight=2.0, rule="RULE_SECRET"),
        redaction="REDACTION_SECRET",
        source="SOURCE_SECRET",
    )
    trace = snap.trace()
    text = canonical_json(trace.fields) + repr(trace.issues)
    assert "SECRET" not in text
    assert not {"labels", "slice", "sampling", "redaction", "source"} & set(trace.fields)


def test_event_after_the_cutoff_raises_window_violation() -> None:
    """Hindsight guard: an event after the cutoff event makes trace() refuse."""
    events = order42_events()
    window = Window(rule=WindowRule.BEFORE_TOOL_CALL, cutoff_event_id="e1")
    with pytest.raises(WindowViolation):
        snapshot(events, window=window).trace()


def test_event_timestamped_after_the_cutoff_time_raises() -> None:
    """Hindsight guard: an event stamped later than cutoff_time makes trace() refuse."""
    events = order42_events()
    events[-1] = events[-1].model_copy(update={"timestamp": T0 + timedelta(seconds=5)})
    window = Window(rule=WindowRule.INVOCATION_END, cutoff_event_id="e4", cutoff_time=T0)
    with pytest.raises(WindowViolation):
        snapshot(events, window=window).trace()


def test_cutoff_event_missing_raises() -> None:
    """A cutoff naming an event that is not in the snapshot is refused too."""
    window = Window(rule=WindowRule.THROUGH_EVENT, cutoff_event_id="nope")
    with pytest.raises(WindowViolation):
        snapshot(order42_events(), window=window).trace()
