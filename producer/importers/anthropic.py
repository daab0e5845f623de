"""Anthropic Messages: a request (and optionally its response) per record (docs/formats.md).

Record: ``{"id"?, "system"?, "messages": [...], "tools"?: [...], ...extras}`` or a logged
exchange ``{"request": {...}, "response": {...}, ...extras}``. Assistant ``text`` blocks form one
assistant event, ``tool_use`` blocks its child calls (``input`` is already an object);
``tool_result`` blocks inside a *user* message are results paired by ``tool_use_id`` (never a
new user turn); ``is_error`` results are results with ``status="error"``, not issues. Thinking
blocks are skipped silently (docs/semantics.md §1); server/MCP tool blocks and images are flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    read_extras,
    req_list,
    text_of,
    tool_specs,
)
from .openai_chat import trace_id_of

__all__ = ["NAME", "detect", "parse"]

NAME = "anthropic"

_SKIPPED = {"thinking", "redacted_thinking"}
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}


def detect(record: Mapping[str, Any]) -> bool:
    """Anthropic-only shapes: a ``message`` response, ``input_schema`` tools, or its blocks."""
    request = record.get("request")
    response = record.get("response")
    if isinstance(response, dict) and response.get("type") == "message":
        return True
    body = request if isinstance(request, dict) else record
    if not isinstance(body.get("messages"), list):
        return False
    return _anthropic_tools(body.get("tools")) or _anthropic_blocks(body["messages"])


def _anthropic_tools(tools: object) -> bool:
    return isinstance(tools, list) and any(
        isinstance(t, dict) and "input_schema" in t for t in tools
    )


def _anthropic_blocks(messages: list[Any]) -> bool:
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and text_of(b) in _ANTHROPIC_BLOCKS for b in content
        ):
            return True
    return False


def parse(record: dict[str, Any], fallback_id: str) -> list[ParsedTrace]:
    """One trace from a request record or a request/response exchange."""
    request = opt_obj(record, "request")
    body, base = (request, "request") if request is not None else (record, "")
    builder = EventBuilder(trace_id_of(record, fallback_id))
    _system(builder, body.get("system"), _at(base, "system"))
    for index, message in enumerate(req_list(body, "messages", base)):
        _message(builder, message, f"{_at(base, 'messages')}[{index}]")
    response = opt_obj(record, "response")
    if response is not None:
        _response(builder, response)
    return [
        ParsedTrace(
            trace_id=builder.trace_id,
            events=tuple(builder.events),
            source=NAME,
            tools=tool_specs(body.get("tools"), _at(base, "tools")),
            extras=read_extras(record),
        )
    ]


def _at(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


def _system(builder: EventBuilder, system: object, path: str) -> None:
    if system is None:
        return
    text, issues = content_text(system, path, unsupported=UNSUPPORTED_MESSAGE_CONTENT)
    builder.message(EventType.SYSTEM, text or None, issues)


def _message(builder: EventBuilder, raw: object, path: str) -> None:
    message = as_obj(raw, path)
    role = opt_str(message, "role", path)
    content = message.get("content")
    if role == "assistant":
        _assistant(builder, content, f"{path}.content")
    elif role == "user":
        _user(builder, content, f"{path}.content")
    else:
        raise FieldError(f"{path}.role", "INVALID_FIELD", "role must be user or assistant")


def _blocks(content: object, path: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise FieldError(path, "INVALID_FIELD", "expected string or list of blocks")
    return [as_obj(block, f"{path}[{i}]") for i, block in enumerate(content)]


def _assistant(
    builder: EventBuilder,
    content: object,
    path: str,
    timestamp: datetime | None = None,
    extra: tuple[str, ...] = (),
) -> None:
    blocks = _blocks(content, path)
    texts: list[str] = []
    issues = list(extra)
    for index, block in enumerate(blocks):
        kind = text_of(block)
        if kind == "text":
            texts.append(_text(block, f"{path}[{index}]"))
        elif kind not in _SKIPPED and kind != "tool_use":
            issues.append(UNSUPPORTED_MESSAGE_CONTENT)  # server/MCP tools: no client result
    text = "\n".join(texts) or None
    parent = builder.message(EventType.ASSISTANT, text, issues, timestamp)
    for index, block in enumerate(blocks):
        if block.get("type") == "tool_use":
            block_path = f"{path}[{index}]"
            builder.call(
                parent,
                opt_str(block, "id", block_path),
                opt_str(block, "name", block_path),
                block.get("input"),
                timestamp=timestamp,
            )


def _text(block: dict[str, Any], path: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise FieldError(f"{path}.text", "INVALID_FIELD", "expected string")
    return text


def _user(builder: EventBuilder, content: object, path: str) -> None:
    texts: list[str] = []
    issues: list[str] = []
    for index, block in enumerate(_blocks(content, path)):
        kind = text_of(block)
        if kind == "tool_result":
            _result(builder, block, f"{path}[{index}]")
        elif kind == "text":
            texts.append(_text(block, f"{path}[{index}]"))
        else:
            issues.append(UNSUPPORTED_MESSAGE_CONTENT)
    if texts or issues:  # a message of tool results only is not a new user turn
        builder.message(EventType.USER, "\n".join(texts) or None, issues)


def _result(builder: EventBuilder, block: dict[str, Any], path: str) -> None:
    text, issues = content_text(
        block.get("content"), f"{path}.content", unsupported=UNSUPPORTED_TOOL_CONTENT
    )
    is_error = block.get("is_error")
    status = "error" if is_error is True else None
    builder.result(opt_str(block, "tool_use_id", path), text, issues, status=status)


def _response(builder: EventBuilder, response: dict[str, Any]) -> None:
    if response.get("type") == "error" or "error" in response:
        raise FieldError("response", "ERROR_RESPONSE", "the logged response is an API error")
    stop = text_of(response, "stop_reason")
    extra = (TRUNCATED_CONTENT,) if stop == "max_tokens" else ()
    _assistant(builder, response.get("content"), "response.content", None, extra)
