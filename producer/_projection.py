"""Snapshot → engine :class:`~worker.evaluation.Trace` (used by :meth:`Snapshot.trace`).

It is given the snapshot's parts, not the snapshot: the contract module calls it, so it must not
import that module back.

The in-window events become OpenAI chat-format messages, in order, and go through
:meth:`Trace.from_frozen_parts`, so a snapshot is normalized by exactly the same trace rules as any
other trace (:meth:`Trace.from_messages`, docs/semantics.md §1). Tool-call events join the assistant
message named by ``parent_id`` (else the assistant message right before them, else a new assistant
message with no text). Importer issue codes on events and on the snapshot are appended to the
trace's issues, making it incomplete.
A ``tool_call`` unit's proposed call (outside the window) becomes the field ``proposed_call``
(``{name, arguments}``), never a ``tool_calls`` entry, so no result can leak into it.

The snapshot's JSON values are already frozen, so they are handed over as they are: parsed call
arguments are not printed and parsed back, catalogs and extra fields are not thawed to be frozen
again (measured: ~45% of the projection's CPU went to those copies).

Only evidence crosses over: gold labels, slice metadata, sampling and redaction facts are never
part of the trace, so they can never reach a judge.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from worker.canonical_json import JsonValue, thaw
from worker.evaluation import Trace

from ._events import Event, ToolRound, ToolSpec

__all__ = ["project", "session_requests"]


def project(
    trace_id: str,
    events: Iterable[Event],
    *,
    tools: Iterable[ToolSpec] | None,
    tool_rounds: Iterable[ToolRound] | None,
    proposed_call: Event | None,
    evidence: Mapping[str, JsonValue],
    issues: Sequence[str],
) -> Trace:
    """The trace of a snapshot's parts (the caller has already checked the window).

    ``evidence``: the snapshot's set fields beyond its events (contexts, claims, expected calls).
    """
    projector = _Projector()
    for event in events:
        projector.add(event)
    return Trace.from_frozen_parts(
        trace_id,
        projector.messages,
        _catalog(tools),
        _extras(tool_rounds, proposed_call, evidence, projector.positions),
        (*projector.issues, *issues),
    )


class _Projector:
    """Accumulates messages, the message index holding each event, and importer issues."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.positions: dict[str, int] = {}
        self.issues: list[str] = []

    def add(self, event: Event) -> None:
        self.issues.extend(event.issues)
        kind = event.type.value
        if kind == "tool_call":
            index = self._host(event.parent_id)
            self.messages[index].setdefault("tool_calls", []).append(_call(event))
        elif kind == "tool_result":
            index = self._append(_result(event))
        else:
            index = self._append({"role": kind, "content": event.text})
        self.positions[event.id] = index

    def _append(self, message: dict[str, Any]) -> int:
        self.messages.append(message)
        return len(self.messages) - 1

    def _host(self, parent_id: str | None) -> int:
        """The assistant message a call belongs to (created when there is none)."""
        index = self.positions.get(parent_id) if parent_id is not None else None
        if index is not None and self.messages[index]["role"] == "assistant":
            return index
        if self.messages and self.messages[-1]["role"] == "assistant":
            return len(self.messages) - 1
        return self._append({"role": "assistant", "content": None})


def _call(event: Event) -> dict[str, Any]:
    return {
        "id": event.call_id,
        "type": "function",
        "function": {"name": event.tool_name, "arguments": _arguments(event.arguments)},
    }


def _arguments(value: JsonValue) -> JsonValue:
    """Arguments as the chat format may carry them: a parsed object (frozen, kept as it is) or
    text. A raw string (unparsable text) passes through verbatim.

    Any other value (a list, a number) is printed as JSON text, as it always was: the trace keeps
    that text as the call's arguments (flagged ``INVALID_TOOL_ARGUMENTS``), so it must not change.
    """
    if value is None or isinstance(value, str | Mapping):
        return value
    return json.dumps(thaw(value), ensure_ascii=False)


def _result(event: Event) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool", "tool_call_id": event.call_id, "content": event.text}
    if event.tool_name is not None:
        message["name"] = event.tool_name
    if event.status is not None:
        message["status"] = event.status
    return message


def _catalog(tools: Iterable[ToolSpec] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    return [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]


def _extras(
    tool_rounds: Iterable[ToolRound] | None,
    call: Event | None,
    evidence: Mapping[str, JsonValue],
    positions: dict[str, int],
) -> dict[str, Any]:
    """Fields beyond the messages. Their tuples are the model's own (frozen JSON, or strings
    validated as exact ``str``), so the trace keeps them."""
    extras: dict[str, Any] = {}
    if tool_rounds is not None:
        extras["available_tool_snapshots"] = _rounds(tool_rounds, positions)
    if call is not None:
        extras["proposed_call"] = {"name": call.tool_name, "arguments": call.arguments}
    extras.update(evidence)
    return extras


def _rounds(rounds: Iterable[ToolRound], positions: dict[str, int]) -> list[dict[str, Any]]:
    """Each round's catalog, placed at the index of the message that round produced."""
    return [
        {"after_message_count": positions[r.event_id], "tools": _catalog(r.tools)}
        for r in rounds
        if r.event_id in positions
    ]


def session_requests(trace: Trace) -> Trace:
    """``trace`` judged as a session: ``request`` is its first user request (a non-blank user
    message, as the engine reads requests) and ``last_request`` its last one."""
    messages = trace.list("messages")
    users = [
        text
        for m in messages
        if isinstance(m, Mapping)
        and m.get("role") == "USER"
        and isinstance(text := m.get("text"), str)
        and text.strip()
    ]
    first, last = (users[0], users[-1]) if users else ("", "")
    return trace.extended({"request": first, "last_request": last})
