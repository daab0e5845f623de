"""evalq's own fields JSON: ``{"id", "fields": {...}, "issues"?: [...]}`` (docs/semantics.md §1).

The snapshot contract is event based, so the canonical fields are mapped back into events:

- with ``fields.messages`` (``[{role, text}]``, roles ``SYSTEM``/``USER``/``ASSISTANT``/``TOOL``
  in any case): one event per message; each ``tool_calls[i]`` becomes a call event right after
  the message at its ``message_index`` (parent = that message) and its ``result`` a result
  event right after the message at ``result_message_index`` (or after the calls);
- without messages: ``request`` → user event, the calls under one assistant step, their results,
  then ``final_answer`` → assistant event.

``available_tools`` is the catalog (absent → ``None``, ``[]`` → empty);
``available_tool_snapshots`` become per-round catalogs at the message after
``after_message_count``. ``contexts``/``claims``/``expected_tool_calls`` ride along. Trace-level
``issues`` have no event of their own: they are carried on the trace and attached to the first
event of every snapshot cut from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from producer.snapshot import EventType, ToolRound

from ._common import (
    EventBuilder,
    Extras,
    FieldError,
    ParsedTrace,
    as_obj,
    opt_list,
    opt_str,
    read_extras,
    req_obj,
    text_of,
    tool_specs,
)
from .openai_chat import trace_id_of

__all__ = ["NAME", "detect", "parse"]

NAME = "fields"

_ROLES = {
    "system": EventType.SYSTEM,
    "user": EventType.USER,
    "assistant": EventType.ASSISTANT,
}


def detect(record: Mapping[str, Any]) -> bool:
    """A ``fields`` object."""
    return isinstance(record.get("fields"), dict)


def parse(record: dict[str, Any], fallback_id: str) -> list[ParsedTrace]:
    """One trace from a fields record."""
    fields = req_obj(record, "fields")
    builder = EventBuilder(trace_id_of(record, fallback_id))
    calls = [
        as_obj(c, f"fields.tool_calls[{i}]") for i, c in enumerate(_list(fields, "tool_calls"))
    ]
    messages = opt_list(fields, "messages", "fields")
    if messages is None:
        message_ids = _from_request(builder, fields, calls)
    else:
        message_ids = _from_messages(builder, messages, calls)
    return [
        ParsedTrace(
            trace_id=builder.trace_id,
            events=tuple(builder.events),
            source=NAME,
            tools=tool_specs(fields.get("available_tools"), "fields.available_tools"),
            tool_rounds=_rounds(fields, message_ids),
            extras=_extras(record, fields),
            issues=_issues(record),
        )
    ]


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    return opt_list(obj, key, "fields") or []


def _extras(record: dict[str, Any], fields: dict[str, Any]) -> Extras:
    merged: dict[str, Any] = {
        k: fields[k] for k in ("contexts", "claims", "expected_tool_calls") if k in fields
    }
    base = read_extras(record)
    extra = read_extras(merged, "fields")
    return Extras(
        contexts=extra.contexts if extra.contexts is not None else base.contexts,
        claims=extra.claims if extra.claims is not None else base.claims,
        expected_tool_calls=extra.expected_tool_calls
        if extra.expected_tool_calls is not None
        else base.expected_tool_calls,
        labels=base.labels,
        slice=base.slice,
        session_id=base.session_id,
    )


def _issues(record: dict[str, Any]) -> tuple[str, ...]:
    raw = opt_list(record, "issues") or []
    for index, code in enumerate(raw):
        if not isinstance(code, str):
            raise FieldError(f"issues[{index}]", "INVALID_FIELD", "expected string")
    return tuple(raw)


def _from_request(
    builder: EventBuilder, fields: dict[str, Any], calls: list[dict[str, Any]]
) -> list[str]:
    request = opt_str(fields, "request", "fields")
    if request is not None:
        builder.message(EventType.USER, request or None)
    if calls:
        step = builder.message(EventType.ASSISTANT, None)
        for index, call in enumerate(calls):
            _call(builder, step, call, index)
        for index, call in enumerate(calls):
            _result(builder, call, index)
    answer = opt_str(fields, "final_answer", "fields")
    if answer:
        builder.message(EventType.ASSISTANT, answer)
    return []


def _from_messages(
    builder: EventBuilder, messages: list[Any], calls: list[dict[str, Any]]
) -> list[str]:
    at_call = _by_index(calls, "message_index")
    at_result = _by_index(calls, "result_message_index")
    unplaced_results = set(range(len(calls))) - _placed(at_result)
    ids: list[str] = []
    for index, raw in enumerate(messages):
        ids.append(_message(builder, raw, index))
        for n in at_call.get(index, []):
            _call(builder, ids[-1] or None, calls[n], n)
        for n in at_call.get(index, []):
            if n in unplaced_results:  # no recorded position: the result follows its call
                _result(builder, calls[n], n)
        for n in at_result.get(index, []):
            _result(builder, calls[n], n)
    for n in sorted(set(range(len(calls))) - _placed(at_call)):
        _call(builder, None, calls[n], n)
        if n in unplaced_results:
            _result(builder, calls[n], n)
    return ids


def _message(builder: EventBuilder, raw: object, index: int) -> str:
    """The event of one message; a TOOL message is represented by its call's result event."""
    path = f"fields.messages[{index}]"
    message = as_obj(raw, path)
    role = (text_of(message, "role") or "").lower()
    if role == "tool":
        return builder.events[-1].id if builder.events else ""
    if role not in _ROLES:
        raise FieldError(f"{path}.role", "INVALID_FIELD", "unknown or missing role")
    return builder.message(_ROLES[role], opt_str(message, "text", path) or None)


def _by_index(calls: list[dict[str, Any]], key: str) -> dict[int, list[int]]:
    placed: dict[int, list[int]] = {}
    for n, call in enumerate(calls):
        value = call.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            placed.setdefault(value, []).append(n)
    return placed


def _placed(table: dict[int, list[int]]) -> set[int]:
    return {n for ns in table.values() for n in ns}


def _call(builder: EventBuilder, parent: str | None, call: dict[str, Any], n: int) -> None:
    path = f"fields.tool_calls[{n}]"
    builder.call(
        parent, opt_str(call, "id", path), opt_str(call, "name", path), call.get("arguments")
    )


def _result(builder: EventBuilder, call: dict[str, Any], n: int) -> None:
    if "result" not in call:
        return
    path = f"fields.tool_calls[{n}]"
    state = opt_str(call, "result_state", path)
    status = None if state in (None, "UNKNOWN") else state.lower()
    builder.result(opt_str(call, "id", path), opt_str(call, "result", path), status=status)


def _rounds(fields: dict[str, Any], message_ids: list[str]) -> tuple[ToolRound, ...] | None:
    raw = opt_list(fields, "available_tool_snapshots", "fields")
    if raw is None:
        return None
    rounds: list[ToolRound] = []
    for index, entry in enumerate(raw):
        path = f"fields.available_tool_snapshots[{index}]"
        snap = as_obj(entry, path)
        after = snap.get("after_message_count")
        tools = tool_specs(snap.get("tools"), f"{path}.tools") or ()
        if not isinstance(after, int) or isinstance(after, bool):
            continue
        if 0 <= after < len(message_ids) and message_ids[after]:
            rounds.append(ToolRound(event_id=message_ids[after], tools=tools))
    return tuple(rounds)
