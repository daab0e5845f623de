"""OpenAI Chat Completions messages: one JSON object per trace (docs/formats.md).

Record: ``{"id"?, "messages": [...], "tools"?: [...], "metadata"?, "labels"?, "contexts"?,
"claims"?, "expected_tool_calls"?, "session_id"?}``. Roles ``system``/``developer``/``user``/
``assistant``/``tool`` (and the legacy ``function``). An assistant message becomes one assistant
event, its ``tool_calls`` child call events; ``tool`` messages are results paired by
``tool_call_id`` (never by position). Legacy ``function_call`` has no id and is flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from producer.snapshot import EventType

from ._common import (
    UNSUPPORTED_MESSAGE_CONTENT,
    UNSUPPORTED_TOOL_CONTENT,
    EventBuilder,
    FieldError,
    ParsedTrace,
    as_obj,
    content_text,
    opt_list,
    opt_obj,
    opt_str,
    parse_arguments,
    read_extras,
    req_list,
    tool_specs,
)

__all__ = ["NAME", "add_message", "detect", "parse", "trace_id_of"]

NAME = "openai_chat"

_MESSAGE_ROLES = {
    "system": EventType.SYSTEM,
    "developer": EventType.SYSTEM,
    "user": EventType.USER,
}


def detect(record: Mapping[str, Any]) -> bool:
    """A top-level ``messages`` list (Anthropic-only shapes are claimed by that importer first)."""
    return isinstance(record.get("messages"), list) and "fields" not in record


def trace_id_of(record: Mapping[str, Any], fallback_id: str) -> str:
    """The record's own id (``id`` or ``trace_id``), else the reader's content-derived one."""
    for key in ("trace_id", "id"):
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if value is not None and not isinstance(value, str):
            raise FieldError(key, "INVALID_FIELD", "expected string")
    return fallback_id


def parse(record: dict[str, Any], fallback_id: str) -> list[ParsedTrace]:
    """One trace from a messages record."""
    builder = EventBuilder(trace_id_of(record, fallback_id))
    for index, message in enumerate(req_list(record, "messages")):
        add_message(builder, message, f"messages[{index}]")
    return [
        ParsedTrace(
            trace_id=builder.trace_id,
            events=tuple(builder.events),
            source=NAME,
            tools=tool_specs(record.get("tools"), "tools"),
            extras=read_extras(record),
        )
    ]


def add_message(
    builder: EventBuilder,
    raw: object,
    path: str,
    timestamp: datetime | None = None,
    extra_issues: tuple[str, ...] = (),
) -> str:
    """Append one Chat Completions message (and its calls); returns its event id."""
    message = as_obj(raw, path)
    role = opt_str(message, "role", path)
    if role in _MESSAGE_ROLES:
        text, issues = content_text(
            message.get("content"), f"{path}.content", unsupported=UNSUPPORTED_MESSAGE_CONTENT
        )
        return builder.message(
            _MESSAGE_ROLES[role], text or None, [*issues, *extra_issues], timestamp
        )
    if role == "assistant":
        return _assistant(builder, message, path, timestamp, extra_issues)
    if role in ("tool", "function"):
        return _tool(builder, message, path, timestamp, extra_issues)
    raise FieldError(f"{path}.role", "INVALID_FIELD", "unknown or missing message role")


def _assistant(
    builder: EventBuilder,
    message: dict[str, Any],
    path: str,
    timestamp: datetime | None,
    extra_issues: tuple[str, ...],
) -> str:
    text, issues = content_text(
        message.get("content"), f"{path}.content", unsupported=UNSUPPORTED_MESSAGE_CONTENT
    )
    if text is None:
        text = opt_str(message, "refusal", path)
    parent = builder.message(EventType.ASSISTANT, text or None, [*issues, *extra_issues], timestamp)
    for index, call in enumerate(opt_list(message, "tool_calls", path) or []):
        _call(builder, parent, call, f"{path}.tool_calls[{index}]", timestamp)
    legacy = opt_obj(message, "function_call", path)
    if legacy is not None:  # deprecated functions API: no id, so pairing cannot be exact
        name = opt_str(legacy, "name", f"{path}.function_call")
        builder.call(
            parent, None, name, parse_arguments(legacy.get("arguments"))[0], timestamp=timestamp
        )
    return parent


def _call(
    builder: EventBuilder, parent: str, raw: object, path: str, timestamp: datetime | None
) -> None:
    call = as_obj(raw, path)
    call_id = opt_str(call, "id", path)
    custom = opt_obj(call, "custom", path)
    if custom is not None:  # free-text "custom" tools carry raw input, not JSON arguments
        name = opt_str(custom, "name", f"{path}.custom")
        builder.call(parent, call_id, name, custom.get("input"), timestamp=timestamp)
        return
    function = opt_obj(call, "function", path) or {}
    name = opt_str(function, "name", f"{path}.function")
    arguments, _ = parse_arguments(function.get("arguments"))
    builder.call(parent, call_id, name, arguments, timestamp=timestamp)


def _tool(
    builder: EventBuilder,
    message: dict[str, Any],
    path: str,
    timestamp: datetime | None,
    extra_issues: tuple[str, ...],
) -> str:
    text, issues = content_text(
        message.get("content"), f"{path}.content", unsupported=UNSUPPORTED_TOOL_CONTENT
    )
    call_id = opt_str(message, "tool_call_id", path)
    return builder.result(call_id, text, [*issues, *extra_issues], timestamp=timestamp)
