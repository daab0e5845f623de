"""A logged Chat Completions exchange ``{"request": {...}, "response": {...}}``.

See docs/formats.md, ``chat_exchange``.

Gateways and proxies store the last request (history + ``tools``) with its response (the final
turn): since the API is stateless, that pair is the complete trace. The catalog comes from the
request only. ``choices[0]`` is the evaluated turn; ``finish_reason: "length"`` means the model
output was cut (``TRUNCATED_CONTENT``). The response's ``created`` time stamps its events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._common import (
    TRUNCATED_CONTENT,
    EventBuilder,
    FieldError,
    ParsedTrace,
    as_obj,
    opt_str,
    read_extras,
    req_list,
    req_obj,
    tool_specs,
    utc_from_unix_s,
)
from .openai_chat import add_message, trace_id_of

__all__ = ["NAME", "detect", "parse"]

NAME = "chat_exchange"


def detect(record: Mapping[str, Any]) -> bool:
    """A ``request`` with ``messages`` (the response may be absent or an error)."""
    request = record.get("request")
    return isinstance(request, dict) and isinstance(request.get("messages"), list)


def parse(record: dict[str, Any], fallback_id: str) -> list[ParsedTrace]:
    """One trace: the request's history, then ``choices[0].message`` of the response."""
    request = req_obj(record, "request")
    response = req_obj(record, "response")
    own_id = opt_str(response, "id", "response")
    builder = EventBuilder(trace_id_of(record, own_id or fallback_id))
    for index, message in enumerate(req_list(request, "messages", "request")):
        add_message(builder, message, f"request.messages[{index}]")
    _choice(builder, response)
    return [
        ParsedTrace(
            trace_id=builder.trace_id,
            events=tuple(builder.events),
            source=NAME,
            tools=tool_specs(request.get("tools"), "request.tools"),
            extras=read_extras(record),
        )
    ]


def _choice(builder: EventBuilder, response: dict[str, Any]) -> None:
    if "error" in response:
        raise FieldError("response.error", "ERROR_RESPONSE", "the logged response is an error")
    choices = req_list(response, "choices", "response")
    if not choices:
        raise FieldError("response.choices", "MISSING_FIELD", "the response has no choices")
    choice = as_obj(choices[0], "response.choices[0]")
    truncated = (TRUNCATED_CONTENT,) if choice.get("finish_reason") == "length" else ()
    add_message(
        builder,
        req_obj(choice, "message", "response.choices[0]"),
        "response.choices[0].message",
        timestamp=utc_from_unix_s(response.get("created")),
        extra_issues=truncated,
    )
