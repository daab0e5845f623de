"""OpenAI Responses API items: a logged request/response pair per record (docs/formats.md).

Record: ``{"request": {"instructions"?, "input": str | [items], "tools"?}, "response"?: {"output":
[items], "status", "created_at"}, ...extras}``. Items: messages, ``function_call`` (paired on
``call_id``, never the item ``id``), ``function_call_output``, ``custom_tool_call`` and its
output; ``reasoning`` is skipped; built-in tool items (web search, MCP, ...) are flagged. The
model's consecutive output items form one assistant step (a text preamble plus its calls), the
same shape a Chat Completions assistant message gives. The catalog comes from ``request.tools``
only, never from the echoed ``response.tools``. ``previous_response_id``/``conversation`` or
``item_reference`` mean the history lives on the server: flagged ``MISSING_HISTORY``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from producer.snapshot import EventType

from ._common import (
    TRUNCATED_CONTENT,
    UNSUPPORTED_MESSAGE_CONTENT,
    UNSUPPORTED_TOOL_CONTENT,
    EventBuilder,
    FieldError,
    ParsedTrace,
    as_obj,
    content_text,
    opt_obj,
    opt_str,
    parse_arguments,
    read_extras,
    req_obj,
    text_of,
    tool_specs,
    utc_from_unix_s,
)
from .openai_chat import trace_id_of

__all__ = ["MISSING_HISTORY", "NAME", "detect", "parse"]

NAME = "openai_responses"
MISSING_HISTORY = "MISSING_HISTORY"

_ROLES = {
    "system": EventType.SYSTEM,
    "developer": EventType.SYSTEM,
    "user": EventType.USER,
    "assistant": EventType.ASSISTANT,
}
_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
_OUTPUTS = {"function_call_output", "custom_tool_call_output"}
_IN_FLIGHT = {"in_progress", "queued"}


def detect(record: Mapping[str, Any]) -> bool:
    """A request with ``input`` (items or text) or a ``response`` object."""
    request = record.get("request")
    response = record.get("response")
    if isinstance(response, dict) and response.get("object") == "response":
        return True
    return isinstance(request, dict) and "input" in request and "messages" not in request


@dataclass
class _State:
    """The open assistant step (consecutive model items) items attach to."""

    builder: EventBuilder
    step: str | None = None
    timestamp: datetime | None = None


def parse(record: dict[str, Any], fallback_id: str) -> list[ParsedTrace]:
    """One trace from a Responses request (and its response, when logged)."""
    request = req_obj(record, "request")
    response = opt_obj(record, "response")
    own_id = opt_str(response, "id", "response") if response else None
    state = _State(EventBuilder(trace_id_of(record, own_id or fallback_id)))
    history = _server_history(request, response)
    _instructions(state, request)
    _input(state, request.get("input"), "request.input", history)
    not_ready = _output(state, response) if response is not None else None
    return [
        ParsedTrace(
            trace_id=state.builder.trace_id,
            events=tuple(state.builder.events),
            source=NAME,
            tools=tool_specs(request.get("tools"), "request.tools"),
            extras=read_extras(record),
            not_ready=not_ready,
        )
    ]


def _server_history(request: dict[str, Any], response: dict[str, Any] | None) -> bool:
    keys = ("previous_response_id", "conversation")
    return any(request.get(k) for k in keys) or any((response or {}).get(k) for k in keys)


def _instructions(state: _State, request: dict[str, Any]) -> None:
    text = opt_str(request, "instructions", "request")
    if text:
        state.builder.message(EventType.SYSTEM, text)


def _input(state: _State, value: object, path: str, server_history: bool) -> None:
    first = len(state.builder.events)
    if isinstance(value, str):
        state.builder.message(EventType.USER, value or None)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _item(state, item, f"{path}[{index}]")
    elif value is not None:
        raise FieldError(path, "INVALID_FIELD", "expected string or list of items")
    if server_history:
        _flag_first(state, first)


def _flag_first(state: _State, first: int) -> None:
    events = state.builder.events
    if first < len(events):
        event = events[first]
        events[first] = event.model_copy(update={"issues": (*event.issues, MISSING_HISTORY)})
    else:
        state.builder.message(EventType.USER, None, [MISSING_HISTORY])


def _item(state: _State, raw: object, path: str) -> None:
    item = as_obj(raw, path)
    kind = text_of(item) if "type" in item else "message"
    if kind == "message" or (kind is None and "role" in item):
        _message(state, item, path)
    elif kind in _CALLS:
        _call(state, item, path, _CALLS[kind])
    elif kind in _OUTPUTS:
        _result(state, item, path)
    elif kind == "reasoning":
        return  # like thinking blocks: never evidence, never an issue
    elif kind == "item_reference":
        _assistant_issue(state, MISSING_HISTORY)
    else:  # built-in tools run server side: call and result sit in one item
        _assistant_issue(state, UNSUPPORTED_MESSAGE_CONTENT)


def _message(state: _State, item: dict[str, Any], path: str) -> None:
    role = opt_str(item, "role", path)
    if role not in _ROLES:
        raise FieldError(f"{path}.role", "INVALID_FIELD", "unknown or missing message role")
    text, issues = content_text(
        item.get("content"), f"{path}.content", unsupported=UNSUPPORTED_MESSAGE_CONTENT
    )
    event = state.builder.message(_ROLES[role], text or None, issues, state.timestamp)
    state.step = event if role == "assistant" else None


def _step(state: _State) -> str:
    if state.step is None:
        state.step = state.builder.message(EventType.ASSISTANT, None, (), state.timestamp)
    return state.step


def _call(state: _State, item: dict[str, Any], path: str, key: str) -> None:
    raw = item.get(key)
    arguments = parse_arguments(raw)[0] if key == "arguments" else raw
    state.builder.call(
        _step(state),
        opt_str(item, "call_id", path),
        opt_str(item, "name", path),
        arguments,
        timestamp=state.timestamp,
    )


def _result(state: _State, item: dict[str, Any], path: str) -> None:
    state.step = None
    text, issues = content_text(
        item.get("output"), f"{path}.output", unsupported=UNSUPPORTED_TOOL_CONTENT
    )
    state.builder.result(opt_str(item, "call_id", path), text, issues, timestamp=state.timestamp)


def _assistant_issue(state: _State, code: str) -> None:
    events = state.builder.events
    step = _step(state)
    index = next(i for i, e in enumerate(events) if e.id == step)
    events[index] = events[index].model_copy(update={"issues": (*events[index].issues, code)})


def _output(state: _State, response: dict[str, Any]) -> str | None:
    status = text_of(response, "status")
    if status in _IN_FLIGHT:
        return "RESPONSE_IN_PROGRESS"
    if "error" in response and response["error"] is not None:
        raise FieldError("response.error", "ERROR_RESPONSE", "the logged response is an error")
    state.step = None
    state.timestamp = utc_from_unix_s(response.get("created_at"))
    output = response.get("output")
    if not isinstance(output, list):
        raise FieldError("response.output", "INVALID_FIELD", "expected a list of items")
    for index, item in enumerate(output):
        _item(state, item, f"response.output[{index}]")
    if status == "incomplete":
        _assistant_issue(state, TRUNCATED_CONTENT)
    return None
