"""The fast projection (frozen values handed over as they are) against the obvious one.

:func:`_reference` is the projection as it was first written: every frozen value thawed, call
arguments printed as JSON text for :meth:`Trace.from_messages` to parse back, the extra fields
added by :meth:`Trace.extended`. ``Snapshot.trace()`` must give exactly its result (same values,
same exact types, same key order, same issues) or raise the same error, for every snapshot the
repository's example and fixture files yield and for generated ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer import read_snapshots
from producer.snapshot import (
    Event,
    EventType,
    Snapshot,
    ToolRound,
    ToolSpec,
    Unit,
    UnitRef,
    Window,
    WindowRule,
)
from tests.properties.strategies import examples, json_values, nasty_text
from worker.evaluation import Trace, freeze, thaw

REPO = Path(__file__).resolve().parents[1]
TRACE_FILES = (
    REPO / "examples" / "traces.jsonl",
    *sorted((REPO / "tests" / "fixtures" / "traces").glob("*.jsonl")),
)
UNITS = ("invocation", "session", "tool_call")


# --- the reference: the first, obvious projection ---------------------------------------------


def _reference(snapshot: Snapshot) -> Trace:
    snapshot.check_window()
    messages: list[dict[str, Any]] = []
    positions: dict[str, int] = {}
    issues: list[str] = []
    for event in snapshot.events:
        issues.extend(event.issues)
        positions[event.id] = _place(messages, positions, event)
    base = Trace.from_messages(snapshot.trace_id, messages, _ref_catalog(snapshot.tools))
    trace = base.extended(_ref_extras(snapshot, positions), (*issues, *snapshot.issues))
    if snapshot.unit.kind is not Unit.SESSION:
        return trace
    users = [m["content"] for m in messages if m["role"] == "user" and (m["content"] or "").strip()]
    first, last = (users[0], users[-1]) if users else ("", "")
    return trace.extended({"request": first, "last_request": last})


def _place(messages: list[dict[str, Any]], positions: dict[str, int], event: Event) -> int:
    kind = event.type.value
    if kind == "tool_call":
        index = _ref_host(messages, positions, event.parent_id)
        messages[index].setdefault("tool_calls", []).append(_ref_call(event))
        return index
    if kind == "tool_result":
        message = {"role": "tool", "tool_call_id": event.call_id, "content": event.text}
        if event.tool_name is not None:
            message["name"] = event.tool_name
        if event.status is not None:
            message["status"] = event.status
    else:
        message = {"role": kind, "content": event.text}
    messages.append(message)
    return len(messages) - 1


def _ref_host(messages: list[dict[str, Any]], positions: dict[str, int], parent: Any) -> int:
    index = positions.get(parent) if parent is not None else None
    if index is not None and messages[index]["role"] == "assistant":
        return index
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    return len(messages) - 1


def _ref_call(event: Event) -> dict[str, Any]:
    arguments = event.arguments
    if arguments is not None and not isinstance(arguments, str):
        arguments = json.dumps(thaw(arguments), ensure_ascii=False)
    function = {"name": event.tool_name, "arguments": arguments}
    return {"id": event.call_id, "type": "function", "function": function}


def _ref_catalog(tools: Iterable[ToolSpec] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    return [
        {"name": t.name, "description": t.description, "parameters": thaw(t.parameters)}
        for t in tools
    ]


def _ref_extras(snapshot: Snapshot, positions: dict[str, int]) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if snapshot.tool_rounds is not None:
        extras["available_tool_snapshots"] = [
            {"after_message_count": positions[r.event_id], "tools": _ref_catalog(r.tools)}
            for r in snapshot.tool_rounds
            if r.event_id in positions
        ]
    call = snapshot.unit.call
    if call is not None:
        extras["proposed_call"] = {"name": call.tool_name, "arguments": thaw(call.arguments)}
    for key in ("contexts", "claims", "expected_tool_calls"):
        value = getattr(snapshot, key)
        if value is not None:
            extras[key] = thaw(value)
    return extras


# --- the comparison -----------------------------------------------------------------------------


def _exact(value: Any) -> Any:
    """The value with every container's kind, key order and every scalar's exact type spelled out
    (``==`` would merge ``True``/``1``/``1.0``, canonical JSON would sort keys)."""
    if type(value) is MappingProxyType:
        return ("map", tuple((type(k), k, _exact(v)) for k, v in value.items()))
    if type(value) is tuple:
        return ("list", tuple(_exact(v) for v in value))
    assert value is None or type(value) in (str, int, float, bool), type(value)
    return (type(value), repr(value))


def _outcome(snapshot: Snapshot, project: Any) -> tuple[Any, ...]:
    try:
        trace = project(snapshot)
    except ValueError as exc:
        return ("refused", type(exc), str(exc))
    present = tuple(key for key in trace.fields if trace.has(key))
    return (trace.id, _exact(trace.fields), trace.issues, present)


def _assert_same_as_reference(snapshot: Snapshot) -> None:
    expected = _outcome(snapshot, _reference)
    got = _outcome(snapshot, Snapshot.trace)
    assert got == expected
    if got[0] != "refused":  # and the fast trace equals by the trace's own rule too
        assert snapshot.trace() == _reference(snapshot)


# --- the repository's files ---------------------------------------------------------------------


@cache
def _file_snapshots() -> tuple[Snapshot, ...]:
    found: list[Snapshot] = []
    for path in TRACE_FILES:
        for unit in UNITS:
            found += read_snapshots(path, unit=unit)
    return tuple(found)


def test_every_example_and_fixture_snapshot_projects_like_the_reference() -> None:
    """Every snapshot of examples/ and the importer fixtures (each unit) equals the reference."""
    snapshots = _file_snapshots()
    assert len(snapshots) > 100  # the files were found and read
    for snapshot in snapshots:
        _assert_same_as_reference(snapshot)


def test_the_file_snapshots_exercise_the_handed_over_values() -> None:
    """The files cover parsed arguments, catalogs and proposed calls (rounds: only further down)."""
    snapshots = _file_snapshots()
    calls = [e for s in snapshots for e in s.events if e.type is EventType.TOOL_CALL]
    assert any(isinstance(e.arguments, MappingProxyType) for e in calls)
    assert any(s.tools for s in snapshots)
    assert any(s.unit.call is not None for s in snapshots)


# --- awkward values, one by one ----------------------------------------------------------------


def _call_snapshot(arguments: Any, **extra: Any) -> Snapshot:
    events = (
        Event(id="u", type=EventType.USER, text="q"),
        Event(id="a", type=EventType.ASSISTANT),
        Event(id="c", type=EventType.TOOL_CALL, tool_name="f", call_id="x", arguments=arguments),
        Event(id="r", type=EventType.TOOL_RESULT, tool_name="f", call_id="x", text="ok"),
    )
    window = Window(rule=WindowRule.SESSION_END, cutoff_event_id="r")
    return Snapshot(trace_id="t", events=events, window=window, labels={}, **extra)


@pytest.mark.parametrize(
    "arguments",
    [
        None,
        {},
        {"order_id": 42, "nested": {"b": [1, 2.5, None, True], "a": "naïve"}, "z": -0.0},
        {1: "int key", "1.5": 1e16},
        '{"order_id": 4',  # raw, invalid text
        '{"order_id": 4}',  # raw text that is a JSON object: parsed, valid
        '{"big": 1e999}',  # parses to infinity: refused, as any non-finite number
        "[1, 2]",
        "NaN",
        "",
        "   ",
        [1, {"a": 2}],  # parsed but not an object: its JSON text is kept and flagged
        ["ü", "\ud800"],
        7,
        1.5,
        True,
        "\u2028 text",
    ],
)
def test_argument_values_project_like_the_reference(arguments: Any) -> None:
    """Parsed, raw, invalid and non-object arguments give the reference's trace (or refusal)."""
    _assert_same_as_reference(_call_snapshot(arguments))


def test_non_object_arguments_keep_their_json_text_byte_for_byte() -> None:
    """A parsed non-object value is kept as json.dumps text (spaces after ',' and ':')."""
    trace = _call_snapshot([1, {"a": "ü"}]).trace()
    assert trace.list("tool_calls")[0]["arguments"] == '[1, {"a": "ü"}]'
    assert trace.issues == ("INVALID_TOOL_ARGUMENTS",)


def test_extra_fields_project_like_the_reference() -> None:
    """Catalog (None parameters), rounds, proposed call, contexts, claims, expected calls."""
    tools = (
        ToolSpec(name="f", parameters={"type": "object", "properties": {"x": {"type": "int"}}}),
        ToolSpec(name="g", description="G.", parameters=["odd", 1]),
        ToolSpec(name="h"),
    )
    proposed = Event(id="p", type=EventType.TOOL_CALL, tool_name="g", arguments={"k": [1.0]})
    snapshot = _call_snapshot(
        {"a": 1},
        tools=tools,
        tool_rounds=(ToolRound(event_id="a", tools=tools), ToolRound(event_id="gone", tools=())),
        unit=UnitRef(kind=Unit.TOOL_CALL, event_id="p", call=proposed),
        contexts=({"doc": "policy", "n": 1}, "plain", None),
        claims=("claim one", ""),
        expected_tool_calls=("f", {"name": "f", "arguments": {"a": 1}}),
        issues=("TRUNCATED_CONTENT",),
    )
    _assert_same_as_reference(snapshot)


def test_a_blank_tool_name_in_the_catalog_is_refused_like_the_reference() -> None:
    """The catalog rule (a non-blank name) still applies to a snapshot's tools."""
    snapshot = _call_snapshot({"a": 1}, tools=(ToolSpec(name=" "),))
    assert _outcome(snapshot, Snapshot.trace)[0] == "refused"
    _assert_same_as_reference(snapshot)


def test_fast_trace_fields_are_read_only_all_the_way_down() -> None:
    """Handing frozen values over keeps every nested map read-only and every list a tuple."""
    snapshot = _file_snapshots()[0]
    fields = snapshot.trace().fields
    _exact(fields)  # asserts: only mapping proxies, tuples and JSON scalars inside
    with pytest.raises(TypeError):
        fields["messages"][0]["text"] = "changed"


# --- generated snapshots ------------------------------------------------------------------------


def _freezable(value: Any) -> bool:
    try:
        freeze(value)
    except ValueError:  # NaN and infinities: the contract refuses them before any projection
        return False
    return True


_JSON = json_values.filter(_freezable)
_IDS = st.sampled_from(["e0", "e1", "e2", "e3", "e4", "e5"])
_NAMES = st.one_of(st.none(), st.sampled_from(["f", "g", "", " "]), nasty_text)
_CALL_IDS = st.one_of(st.none(), st.sampled_from(["x", "y", "", " "]))
_ARGUMENTS = st.one_of(
    _JSON,
    st.dictionaries(nasty_text, _JSON, max_size=3),
    st.sampled_from(['{"a": 1}', '{"a": 1', "[1]", "NaN", '{"a": 1e999}', "null", "{}"]),
)
_ISSUES = st.lists(st.sampled_from(["TRUNCATED_CONTENT", "INFERRED_PAIRING"]), max_size=2)


@st.composite
def _events(draw: st.DrawFn) -> Event:
    kind = draw(st.sampled_from(list(EventType)))
    fields: dict[str, Any] = {"id": draw(_IDS), "type": kind, "issues": tuple(draw(_ISSUES))}
    if kind in (EventType.TOOL_CALL, EventType.TOOL_RESULT):
        fields |= {"tool_name": draw(_NAMES), "call_id": draw(_CALL_IDS)}
    if kind is EventType.TOOL_CALL:
        fields |= {"arguments": draw(_ARGUMENTS), "parent_id": draw(st.none() | _IDS)}
    else:
        fields["text"] = draw(st.none() | nasty_text)
    if kind is EventType.TOOL_RESULT:
        fields["status"] = draw(st.none() | st.sampled_from(["error", "success", "odd status"]))
    return Event(**fields)


_TOOLS = st.lists(
    st.builds(
        ToolSpec,
        name=st.sampled_from(["f", "g", "lookup"]),
        description=nasty_text,
        parameters=_JSON,
    ),
    max_size=3,
).map(tuple)


@st.composite
def _snapshots(draw: st.DrawFn) -> Snapshot:
    events = draw(st.lists(_events(), min_size=1, max_size=8))
    rounds = st.lists(st.builds(ToolRound, event_id=_IDS, tools=_TOOLS), max_size=2).map(tuple)
    call = draw(st.none() | _events().filter(lambda e: e.type is EventType.TOOL_CALL))
    return Snapshot(
        trace_id="gen",
        events=tuple(events),
        window=Window(rule=WindowRule.THROUGH_EVENT, cutoff_event_id=events[-1].id),
        labels={},
        tools=draw(st.none() | _TOOLS),
        tool_rounds=draw(st.none() | rounds),
        unit=UnitRef(kind=Unit.TOOL_CALL, call=call) if call else UnitRef(),
        contexts=draw(st.none() | st.lists(_JSON, max_size=2).map(tuple)),
        claims=draw(st.none() | st.lists(nasty_text, max_size=2).map(tuple)),
        expected_tool_calls=draw(st.none() | st.lists(_JSON, max_size=2).map(tuple)),
        issues=tuple(draw(_ISSUES)),
    )


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_snapshots())
def test_generated_snapshots_project_like_the_reference(snapshot: Snapshot) -> None:
    """Random events, arguments, catalogs, extras: the reference's trace (or its refusal)."""
    _assert_same_as_reference(snapshot)
