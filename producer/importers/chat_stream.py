"""A logged streamed Chat Completions exchange: ``{"request": {...}, "chunks": [...]}``.

See docs/formats.md, ``chat_stream``.

Apps and gateways that stream (``stream=True``) log the request with the
``chat.completion.chunk`` objects as they arrived (``chunks``, or ``response`` holding the list).
A gateway that keeps the raw ``text/event-stream`` body (``"response": "data: {...}\n\n..."``)
is read too. The chunks are assembled the way the SDK assembles them, then read exactly like the
non-streamed ``chat_exchange`` response: ``choices[0]``'s ``delta.content`` (and ``refusal``)
pieces are joined; ``delta.tool_calls`` fragments are joined **by index** (only the first
fragment carries ``id`` and ``function.name``; ``function.arguments`` arrives in pieces); the
last non-null ``finish_reason`` is the choice's. A stream with no ``finish_reason`` was cut off
before its end, like ``finish_reason: "length"``: the answer is ``TRUNCATED_CONTENT``. The first
chunk's ``created`` stamps the answer; its ``id`` names the trace when the record has none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._common import (
    TRUNCATED_CONTENT,
    EventBuilder,
    FieldError,
    ParsedTrace,
    as_obj,
    opt_list,
    opt_obj,
    opt_str,
    read_extras,
    req_list,
    req_obj,
    tool_specs,
    utc_from_unix_s,
)
from .openai_chat import add_message, trace_id_of

__all__ = ["NAME", "assemble", "detect", "parse", "sse_chunks"]

NAME = "chat_stream"


def _chunks_of(record: Mapping[str, Any]) -> object:
    chunks = record.get("chunks")
    return chunks if chunks is not None else record.get("response")


_SSE_DATA = re.compile(r"^data:", re.MULTILINE)


def _is_sse(value: object) -> bool:
    """An event-stream body: some line is a ``data:`` field (comments may come first)."""
    return isinstance(value, str) and _SSE_DATA.search(value) is not None


def detect(record: Mapping[str, Any]) -> bool:
    """A ``request`` with ``messages`` and its chunks (a list, or the raw SSE body text)."""
    request = record.get("request")
    chunks = _chunks_of(record)
    return (
        isinstance(request, dict)
        and isinstance(request.get("messages"), list)
        and (isinstance(chunks, list) or _is_sse(chunks))
    )


def sse_chunks(body: str, path: str) -> list[Any]:
    """The chunk objects of a raw ``text/event-stream`` body (``data: {...}`` events)."""
    chunks: list[Any] = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.startswith("data:"):
            continue  # blank separators, comments, ``event:``/``id:`` fields
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        try:
            chunks.append(json.loads(data))
        except ValueError:
            raise FieldError(path, "INVALID_FIELD", f"event line {number} is not JSON") from None
    return chunks


@dataclass
class _Call:
    id: str | None = None
    type: str | None = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


@dataclass
class Assembled:
    """``choices[0]`` of a stream, put back together."""

    message: dict[str, Any]
    finish_reason: str | None
    created: object
    id: str | None


@dataclass
class _State:
    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None


def assemble(chunks: list[Any], path: str) -> Assembled:
    """The ``choices[0]`` message of a list of ``chat.completion.chunk`` objects."""
    state = _State()
    created: object = None
    stream_id: str | None = None
    for index, raw in enumerate(chunks):
        chunk_path = f"{path}[{index}]"
        chunk = as_obj(raw, chunk_path)
        if created is None:
            created = chunk.get("created")
        stream_id = stream_id or opt_str(chunk, "id", chunk_path)
        for n, choice in enumerate(opt_list(chunk, "choices", chunk_path) or []):
            choice_path = f"{chunk_path}.choices[{n}]"
            obj = as_obj(choice, choice_path)
            if obj.get("index", 0) == 0:  # choices[0] is the evaluated turn
                _apply(state, obj, choice_path)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(state.content) or None}
    if state.refusal:
        message["refusal"] = "".join(state.refusal)
    if state.calls:
        message["tool_calls"] = [_call_dict(state.calls[i]) for i in sorted(state.calls)]
    return Assembled(message, state.finish, created, stream_id)


def _apply(state: _State, choice: dict[str, Any], path: str) -> None:
    delta = opt_obj(choice, "delta", path) or {}
    delta_path = f"{path}.delta"
    for key, parts in (("content", state.content), ("refusal", state.refusal)):
        piece = opt_str(delta, key, delta_path)
        if piece:
            parts.append(piece)
    for n, raw in enumerate(opt_list(delta, "tool_calls", delta_path) or []):
        call_path = f"{delta_path}.tool_calls[{n}]"
        _fragment(state, as_obj(raw, call_path), call_path)
    finish = opt_str(choice, "finish_reason", path)
    if finish is not None:
        state.finish = finish


def _fragment(state: _State, fragment: dict[str, Any], path: str) -> None:
    index = fragment.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise FieldError(f"{path}.index", "INVALID_FIELD", "a tool-call fragment needs an index")
    call = state.calls.setdefault(index, _Call())
    call.id = call.id or opt_str(fragment, "id", path)
    call.type = call.type or opt_str(fragment, "type", path)
    function = opt_obj(fragment, "function", path) or {}
    for key, parts in (("name", call.name), ("arguments", call.arguments)):
        piece = opt_str(function, key, f"{path}.function")
        if piece:
            parts.append(piece)


def _call_dict(call: _Call) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": call.type or "function",
        "function": {"name": "".join(call.name) or None, "arguments": "".join(call.arguments)},
    }


def parse(record: dict[str, Any], fallback_id: str) -> list[ParsedTrace]:
    """One trace: the request's history, then the assembled stream's message."""
    request = req_obj(record, "request")
    key = "chunks" if record.get("chunks") is not None else "response"
    raw = record.get(key)
    chunks = (
        sse_chunks(raw, key) if isinstance(raw, str) and _is_sse(raw) else req_list(record, key)
    )
    stream = assemble(chunks, key)
    builder = EventBuilder(trace_id_of(record, stream.id or fallback_id))
    for index, message in enumerate(req_list(request, "messages", "request")):
        add_message(builder, message, f"request.messages[{index}]")
    cut = stream.finish_reason in (None, "length")
    add_message(
        builder,
        stream.message,
        f"{key}[*]",
        timestamp=utc_from_unix_s(stream.created),
        extra_issues=(TRUNCATED_CONTENT,) if cut else (),
    )
    return [
        ParsedTrace(
            trace_id=builder.trace_id,
            events=tuple(builder.events),
            source=NAME,
            tools=tool_specs(request.get("tools"), "request.tools"),
            extras=read_extras(record),
        )
    ]
