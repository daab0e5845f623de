"""Langfuse exports: a trace with its observations, or observation pages (docs/formats.md).

Two shapes, either one JSON value per line:

- a trace object ``{"id", "timestamp", "name", "sessionId", "input", "output", ...,
  "observations": [...]}`` (what the trace API and UI export give);
- an observations page ``{"data": [...], "meta": {...}}`` (``GET /api/public/v2/observations``):
  its observations are grouped by ``traceId``, and a trace may span pages (lines).

Observations (``id``, ``traceId``, ``parentObservationId``, ``type``, ``startTime``,
``endTime``, ``input``, ``output``, ``level``, ``metadata``) are ordered by start time. Every
``GENERATION`` is one model call: its ``input`` is the Chat Completions ``messages`` list, or
``{"messages", "tools"?}`` when the integration recorded the request's tools (``langfuse.openai``
does), and its ``output`` the assistant message (or its text). The history is taken from the
latest intact call, as for the other span formats, so tool results are paired by the
``tool_call_id`` inside the next generation's input. ``TOOL`` (or ``SPAN``) observations have no
standard call-id field: one is tied to a call when its ``metadata`` names the id
(``tool_call_id`` or ``call_id``), or when exactly one proposed call has its name and exactly
its ``input`` as arguments (never by position or time). A tied observation answers a call the
history leaves open, and its ``level: "ERROR"`` makes the call's result an error result; an
untied one is ignored, and a call nothing answers stays pending. The catalog is the
latest generation's ``input.tools`` (``[]`` stays empty, absent is ``None``). An observation
whose parent is missing (the parent never ended, so Langfuse never received it) makes the trace
incomplete (``MISSING_PARENT_SPAN``), as does one without ``endTime``. Sessions are keyed by
``sessionId``; a later trace of a session repeating the history supersedes the earlier one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from ._common import (
    Extras,
    FieldError,
    Item,
    ParsedTrace,
    as_obj,
    opt_str,
    parse_arguments,
    req_list,
    tool_specs,
)
from ._spans import MISSING_PARENT_SPAN, ChatCall, ToolRun, build_events, merge_prefixes

__all__ = ["NAME", "OBSERVATION_NOT_ENDED", "detect", "merge", "parse", "split"]

NAME = "langfuse"
OBSERVATION_NOT_ENDED = "OBSERVATION_NOT_ENDED"  # an observation with no end: incomplete
_TOOL_TYPES = ("TOOL", "SPAN")
_TRACE = "trace"  # the payload tag of a trace object (its observations come as their own items)


def detect(record: Mapping[str, Any]) -> bool:
    """A trace with an ``observations`` list, or an observations page (``data`` of them)."""
    if isinstance(record.get("observations"), list) and "id" in record:
        return True
    data = record.get("data")
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(o, dict) and "traceId" in o and "type" in o for o in data)
    )


def split(record: dict[str, Any], session: bool) -> Iterator[Any]:  # noqa: ARG001
    """The observations of one line keyed by trace id; a trace object closes its trace."""

    if isinstance(record.get("observations"), list):
        trace_id = opt_str(record, "id")
        if not trace_id:
            raise FieldError("id", "MISSING_FIELD", "the trace has no id")
        observations = record["observations"]
        for index, raw in enumerate(observations):
            yield Item(trace_id, _observation(raw, f"observations[{index}]", trace_id))
        header = {k: v for k, v in record.items() if k != "observations"}
        yield Item(trace_id, (_TRACE, header), closes=True)
        return
    for index, raw in enumerate(req_list(record, "data")):
        path = f"data[{index}]"
        trace_id = opt_str(as_obj(raw, path), "traceId", path)
        if not trace_id:
            raise FieldError(f"{path}.traceId", "MISSING_FIELD", "observation has no trace id")
        yield Item(trace_id, _observation(raw, path, trace_id))


def _observation(raw: object, path: str, trace_id: str) -> dict[str, Any]:
    obs = as_obj(raw, path)
    if not opt_str(obs, "id", path):
        raise FieldError(f"{path}.id", "MISSING_FIELD", "observation has no id")
    owner = opt_str(obs, "traceId", path)
    if owner is not None and owner != trace_id:
        raise FieldError(f"{path}.traceId", "INVALID_FIELD", "observation of another trace")
    opt_str(obs, "type", path)
    return obs


def merge(traces: list[ParsedTrace]) -> list[ParsedTrace]:
    """A session's later trace repeats the earlier history: keep the longest."""
    return merge_prefixes(traces)


def parse(key: str, payloads: list[Any]) -> list[ParsedTrace]:
    """One trace from its observations (and its trace object, when the export has one)."""
    header: dict[str, Any] = {}
    observations: list[dict[str, Any]] = []
    for payload in payloads:
        if isinstance(payload, tuple):
            header = payload[1]
        else:
            observations.append(payload)
    observations.sort(key=lambda o: (_stamp(o.get("startTime")) or _EPOCH, str(o.get("id"))))
    generations = [o for o in observations if o.get("type") == "GENERATION"]
    calls = [_call(o, f"observations[{o.get('id')}]") for o in generations]
    proposed = _proposed_calls(calls)
    tools = [_tool(o, proposed) for o in observations if o.get("type") in _TOOL_TYPES]
    events = tuple(build_events(key, calls, tools))
    return [
        ParsedTrace(
            trace_id=key,
            events=events,
            source=NAME,
            tools=_catalog(generations[-1]) if generations else None,
            extras=Extras(session_id=_session(header, observations)),
            not_ready="NO_CONTENT" if not events else None,
            issues=_issues(observations),
        )
    ]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _stamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def _call(obs: dict[str, Any], path: str) -> ChatCall:
    raw = obs.get("input")
    messages = raw.get("messages") if isinstance(raw, dict) else raw
    if not isinstance(messages, list):
        raise FieldError(f"{path}.input", "INVALID_FIELD", "expected chat messages")
    output = obs.get("output")
    if isinstance(output, str):
        outputs: list[Any] = [{"role": "assistant", "content": output}]
    elif isinstance(output, dict):
        outputs = [{"role": "assistant", **output}]
    elif isinstance(output, list):
        outputs = output
    else:  # no output recorded: the call's answer is missing, not empty
        outputs = []
    return ChatCall(_stamp(obs.get("startTime")), _stamp(obs.get("endTime")), messages, outputs)


def _proposed_calls(calls: list[ChatCall]) -> list[tuple[str, object, object]]:
    """(id, name, parsed arguments) of every call the model proposed in this trace."""
    found: dict[str, tuple[str, object, object]] = {}
    for call in calls:
        for message in [*(call.inputs or []), *(call.outputs or [])]:
            entries = message.get("tool_calls") if isinstance(message, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                function = entry.get("function") if isinstance(entry, dict) else None
                if isinstance(function, dict) and isinstance(entry.get("id"), str):
                    arguments, _ = parse_arguments(function.get("arguments"))
                    found[entry["id"]] = (entry["id"], function.get("name"), arguments)
    return list(found.values())


def _tool(obs: dict[str, Any], proposed: list[tuple[str, object, object]]) -> ToolRun:
    """A tool observation, tied to its call by ``metadata`` id or by identical name and input.

    Only an unambiguous match counts (exactly one proposed call with the observation's name
    and exactly its input as arguments): never by position or time.
    """
    raw = obs.get("metadata")
    metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
    call_id = metadata.get("tool_call_id") or metadata.get("call_id")
    if call_id is None:
        same = [
            c for c, name, args in proposed if name == obs.get("name") and args == obs.get("input")
        ]
        call_id = same[0] if len(same) == 1 else None
    output = obs.get("output")
    text = output if output is None or isinstance(output, str) else json.dumps(output)
    return ToolRun(
        call_id=call_id if isinstance(call_id, str) else None,
        name=obs.get("name") if isinstance(obs.get("name"), str) else None,
        result=text,
        end=_stamp(obs.get("endTime")),
        error=obs.get("level") == "ERROR",
    )


def _catalog(generation: dict[str, Any]) -> tuple[Any, ...] | None:
    raw = generation.get("input")
    if not isinstance(raw, dict):
        return None
    return tool_specs(raw.get("tools"), "input.tools")


def _session(header: dict[str, Any], observations: list[dict[str, Any]]) -> str | None:
    for source in (header, *observations):
        value = source.get("sessionId")
        if isinstance(value, str) and value:
            return value
    return None


def _issues(observations: list[dict[str, Any]]) -> tuple[str, ...]:
    ids = {o.get("id") for o in observations}
    issues: list[str] = []
    if any(o.get("parentObservationId") not in (None, "", *ids) for o in observations):
        issues.append(MISSING_PARENT_SPAN)
    if any(o.get("endTime") is None and o.get("type") != "EVENT" for o in observations):
        issues.append(OBSERVATION_NOT_ENDED)
    return tuple(issues)
