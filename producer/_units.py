"""Units and evidence windows: cut one normalized trace into snapshots.

- ``invocation`` (default): one snapshot per user invocation, from its user message (and any
  consecutive user messages before the agent answered) through its final answer; rule
  ``invocation_end``. Leading system messages (before the first user message) are kept as the
  agent's instructions. The final answer is the last assistant event without calls that follows
  the invocation's last proposed call; anything after it (a late result, an operator note, the
  next turn) is hindsight and is left out. With no final answer the invocation ends at its last
  agent event (call, result or assistant), so a dangling call stays visible (the projection flags
  it PENDING_TOOL_CALL).
- ``session``: all events through the last one; rule ``session_end``; ``unit.event_id`` is the
  last user message (where the session stands; outcomes link by it). The judged ``request`` of
  a session is its *first* user request, the one the session set out to serve; the trace also
  carries the last one as ``last_request`` (see :meth:`Snapshot.trace`).
- ``tool_call``: one snapshot per proposed call, within its invocation, cut just before the
  assistant step that proposed it: the call itself, its sibling calls from the same step, and
  everything after are excluded (a sibling's pending call must not make the window incomplete,
  and its result must not leak). ``unit.event_id`` is the judged call's event id; the cutoff is
  the event before the proposing step (rule ``before_tool_call``). The call's own content is
  not evidence: it rides in ``unit.call`` (name and arguments, never its result), and the
  snapshot's ``tools`` is the catalog offered to the model call that proposed it (its round's
  catalog when the trace records rounds, else the trace's catalog), so call-level metrics
  judge the call against what was available at that position.
- ``through_event``: an explicit cutoff event id, within the invocation that contains it.

``Window.cutoff_time`` is the latest timestamp among the included events (the cutoff event's
own time when clocks agree), so a skewed earlier timestamp can never make the snapshot violate
its own window. A trace flagged ``not_ready`` (in-flight work) gives no snapshot at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from producer.importers import ParsedTrace
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

__all__ = ["NotReadyError", "UnitName", "cut", "invocation_at", "invocation_spans"]

_AGENT = (EventType.ASSISTANT, EventType.TOOL_CALL, EventType.TOOL_RESULT)


class UnitName(StrEnum):
    """The ``unit`` argument of the reader: the three judged units plus an explicit cutoff."""

    INVOCATION = "invocation"
    SESSION = "session"
    TOOL_CALL = "tool_call"
    THROUGH_EVENT = "through_event"


class NotReadyError(ValueError):
    """No snapshot can be made (yet): ``code`` says why (in-flight work, unknown cutoff)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Span:
    """One invocation: ``[start, end]`` inclusive; ``request`` indexes its judged user message."""

    start: int
    request: int
    end: int


def invocation_spans(events: Sequence[Event]) -> list[Span]:
    """The invocations of a trace, in order (a trace with no user message has none)."""
    users = _turn_starts(events)
    spans: list[Span] = []
    for n, (first, last_user) in enumerate(users):
        limit = users[n + 1][0] if n + 1 < len(users) else len(events)
        end = _invocation_end(events, last_user, limit)
        if end is not None:
            spans.append(Span(first, last_user, end))
    return spans


def _turn_starts(events: Sequence[Event]) -> list[tuple[int, int]]:
    """(first, last) user index of each run of user messages not separated by agent events."""
    starts: list[tuple[int, int]] = []
    agent_since = True
    for index, event in enumerate(events):
        if event.type is EventType.USER:
            if agent_since:
                starts.append((index, index))
            else:
                starts[-1] = (starts[-1][0], index)
            agent_since = False
        elif event.type in _AGENT:
            agent_since = True
    return starts


def _invocation_end(events: Sequence[Event], user: int, limit: int) -> int | None:
    turn = range(user + 1, limit)
    parents = {events[i].parent_id for i in turn if events[i].type is EventType.TOOL_CALL}
    last_call = max((i for i in turn if events[i].type is EventType.TOOL_CALL), default=user)
    for index in reversed(range(last_call + 1, limit)):
        event = events[index]
        if event.type is EventType.ASSISTANT and event.id not in parents:
            return index
    return max((i for i in turn if events[i].type in _AGENT), default=None)


def cut(trace: ParsedTrace, unit: UnitName, cutoff_event_id: str | None = None) -> list[Snapshot]:
    """The snapshots of ``trace`` for ``unit``; raises :class:`NotReadyError` when none may be made.

    ``NOT_READY``-style codes: the importer's ``not_ready`` reason, ``NO_INVOCATION`` (no user
    message was answered), ``CUTOFF_NOT_FOUND`` (``through_event`` id not in this trace).
    """
    if trace.not_ready is not None:
        raise NotReadyError(trace.not_ready)
    events = trace.events
    if unit is UnitName.SESSION:
        return _session(trace)
    if unit is UnitName.THROUGH_EVENT:
        return [_through(trace, cutoff_event_id)]
    spans = invocation_spans(events)
    if not spans:
        raise NotReadyError("NO_INVOCATION")
    if unit is UnitName.TOOL_CALL:
        return [snap for span in spans for snap in _tool_calls(trace, span)]
    return [_invocation(trace, span) for span in spans]


def invocation_at(trace: ParsedTrace, request: int) -> Snapshot:
    """The invocation whose judged request is the user event at index ``request``.

    Everything after the request belongs to it, user or system messages included (a live
    observer knows where its invocation began: a reminder the agent loop appends is part of this
    invocation, not the start of the next one). The window starts at the first user message of
    the run that ends at ``request`` and ends as :func:`cut` ends an invocation (its final answer).
    """
    if trace.not_ready is not None:
        raise NotReadyError(trace.not_ready)
    events = trace.events
    start = max(first for first, _ in _turn_starts(events) if first <= request)
    end = _invocation_end(events, request, len(events))
    if end is None:
        raise NotReadyError("NO_INVOCATION")
    return _invocation(trace, Span(start, request, end))


def _prefix(events: Sequence[Event], span_start: int) -> list[int]:
    """Indices of the leading system events (before the first user message) kept as context."""
    first_user = next((i for i, e in enumerate(events) if e.type is EventType.USER), 0)
    return [i for i in range(min(first_user, span_start)) if events[i].type is EventType.SYSTEM]


def _window_indices(events: Sequence[Event], start: int, end: int) -> list[int]:
    return [*_prefix(events, start), *range(start, end + 1)]


def _invocation(trace: ParsedTrace, span: Span) -> Snapshot:
    indices = _window_indices(trace.events, span.start, span.end)
    unit = UnitRef(kind=Unit.INVOCATION, event_id=trace.events[span.request].id)
    return _snapshot(trace, indices, unit, WindowRule.INVOCATION_END, trace.tools)


def _session(trace: ParsedTrace) -> list[Snapshot]:
    events = trace.events
    if not events:
        raise NotReadyError("NO_EVENTS")
    users = [e.id for e in events if e.type is EventType.USER]
    unit = UnitRef(kind=Unit.SESSION, event_id=users[-1] if users else None)
    return [_snapshot(trace, list(range(len(events))), unit, WindowRule.SESSION_END, trace.tools)]


def _tool_calls(trace: ParsedTrace, span: Span) -> list[Snapshot]:
    events = trace.events
    snapshots: list[Snapshot] = []
    for index in range(span.start, span.end + 1):
        call = events[index]
        if call.type is not EventType.TOOL_CALL:
            continue
        step = _step_start(events, span.start, index)
        indices = _window_indices(events, span.start, step - 1)
        proposed = Event(
            id=call.id,
            type=call.type,
            tool_name=call.tool_name,
            call_id=call.call_id,
            arguments=call.arguments,
        )
        unit = UnitRef(kind=Unit.TOOL_CALL, event_id=call.id, call=proposed)
        tools = _catalog_at(trace, step)
        snapshots.append(_snapshot(trace, indices, unit, WindowRule.BEFORE_TOOL_CALL, tools))
    return snapshots


def _catalog_at(trace: ParsedTrace, step: int) -> tuple[ToolSpec, ...] | None:
    """The catalog of the latest round at or before ``step`` (its own round's, when recorded).

    A round's event starts that model call's output, so the proposing step's round sits at
    ``step`` itself; without rounds (or none that early) it is the trace's catalog.
    """
    if trace.tool_rounds is None:
        return trace.tools
    index = {event.id: i for i, event in enumerate(trace.events)}
    offered = [
        (index[r.event_id], r.tools)
        for r in trace.tool_rounds
        if r.event_id in index and index[r.event_id] <= step
    ]
    return max(offered, key=lambda pair: pair[0])[1] if offered else trace.tools


def _step_start(events: Sequence[Event], start: int, call_index: int) -> int:
    """Index of the first event of the assistant step that proposed the call at ``call_index``.

    The step is the proposing assistant event plus its calls; when the call has no recorded
    parent, the step starts at the first call of the contiguous run of calls it belongs to.
    """
    parent = events[call_index].parent_id
    for index in range(start, call_index):
        if parent is not None and events[index].id == parent:
            return index
    index = call_index
    while index - 1 > start and events[index - 1].type is EventType.TOOL_CALL:
        index -= 1
    return index


def _through(trace: ParsedTrace, cutoff_event_id: str | None) -> Snapshot:
    events = trace.events
    position = next((i for i, e in enumerate(events) if e.id == cutoff_event_id), None)
    if position is None:
        raise NotReadyError("CUTOFF_NOT_FOUND")
    starts = [first for first, _ in _turn_starts(events) if first <= position]
    if not starts:  # a cutoff before any user message: the whole prefix, no judged request
        unit = UnitRef(kind=Unit.INVOCATION)
        prefix = list(range(position + 1))
        return _snapshot(trace, prefix, unit, WindowRule.THROUGH_EVENT, trace.tools)
    users = [i for i in range(starts[-1], position + 1) if events[i].type is EventType.USER]
    unit = UnitRef(kind=Unit.INVOCATION, event_id=events[users[-1]].id)
    indices = _window_indices(events, starts[-1], position)
    return _snapshot(trace, indices, unit, WindowRule.THROUGH_EVENT, trace.tools)


def _snapshot(
    trace: ParsedTrace,
    indices: list[int],
    unit: UnitRef,
    rule: WindowRule,
    tools: tuple[ToolSpec, ...] | None,
) -> Snapshot:
    events = tuple(trace.events[i] for i in indices)
    extras = trace.extras
    return Snapshot(
        trace_id=trace.trace_id,
        session_id=extras.session_id,
        unit=unit,
        events=events,
        issues=tuple(trace.issues),  # trace-level codes make every window incomplete
        tools=tools,
        tool_rounds=_rounds(trace.tool_rounds, events),
        window=Window(rule=rule, cutoff_event_id=events[-1].id, cutoff_time=_latest(events)),
        contexts=extras.contexts,
        claims=extras.claims,
        expected_tool_calls=extras.expected_tool_calls,
        labels=extras.labels,
        slice=extras.slice,
        source=trace.source,
        otel=trace.otel,
    )


def _rounds(
    rounds: tuple[ToolRound, ...] | None, events: tuple[Event, ...]
) -> tuple[ToolRound, ...] | None:
    if rounds is None:
        return None
    ids = {e.id for e in events}
    return tuple(r for r in rounds if r.event_id in ids)


def _latest(events: tuple[Event, ...]) -> datetime | None:
    stamps = [e.timestamp for e in events if e.timestamp is not None]
    return max(stamps) if stamps else None
