"""OTLP/JSON traces and logs: OpenTelemetry GenAI semconv and OpenInference (docs/formats.md).

Lines are ``ExportTraceServiceRequest`` (``resourceSpans``) or ``ExportLogsServiceRequest``
(``resourceLogs``) objects, one export batch per line; a trace may span lines. Items are grouped
by trace id (hex, or base64 from the plain protobuf mapping) and a trace closes when its root
span arrives. Per trace:

- **GenAI, current form** (semconv ≥ 1.37): ``gen_ai.input.messages``/``gen_ai.output.messages``
  JSON attributes on inference spans, ``execute_tool`` spans (``gen_ai.tool.call.id``, result,
  status), catalog from ``gen_ai.tool.definitions`` (on ``invoke_agent`` or inference spans).
- **GenAI, event form** (1.28 to 1.36): ``gen_ai.{system,user,assistant,tool}.message`` and
  ``gen_ai.choice`` log records tied to their chat span by span id; no catalog (``None``).
- **OpenInference**: ``llm.input_messages.N.message.*`` flattened attributes on LLM spans, TOOL
  spans (``tool.id``/``tool_call.id``, ``output.value``), catalog ``llm.tools.N.tool.json_schema``
  (or, when absent, the raw request's ``tools`` in ``input.value``: ``[]`` stays empty).
  Content parts ``message.contents.K`` of type ``tool_use``/``tool_call`` (Anthropic's
  instrumentation writes each ``tool_use`` block there *and* under ``message.tool_calls``) are
  calls, counted once by id; a failed TOOL span (status ERROR) makes its result an error result.

A JSON attribute cut by a length limit stays cut: the events it would have given are replaced by
``TRUNCATED_CONTENT`` flags. OpenInference's flattened values are plain strings, so a cut one
may still look whole: when an LLM span's JSON ``input.value``/``output.value`` no longer parses,
its length is the exporter's limit, and every message value or TOOL ``output.value`` that long
is flagged ``TRUNCATED_CONTENT`` (as is a JSON-looking tool result that does not parse).
A parent span missing from the file (it never ended: a crash) makes the trace incomplete
(``MISSING_PARENT_SPAN``); a span with no end time is in-flight work, so the trace is not
ready. Traces with no GenAI content (capture off, non-GenAI spans) are not ready with
``NO_CONTENT``. Spans are ordered by start time then depth; pairing is by call id only.

Every snapshot of a trace carries its OTel ids as provenance (``Snapshot.otel``): the trace id
and the invocation's root span, so the worker's evaluation events attach to that span.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from producer.snapshot import OtelRef

from ._common import (
    TRUNCATED_CONTENT,
    Extras,
    FieldError,
    Item,
    ParsedTrace,
    as_obj,
    tool_spec,
)
from ._spans import (
    MISSING_PARENT_SPAN,
    ChatCall,
    ToolRun,
    build_events,
    merge_prefixes,
    utc_from_ns,
)

__all__ = [
    "GENAI",
    "NAME",
    "OPENINFERENCE",
    "detect",
    "merge",
    "parse_auto",
    "parse_genai",
    "parse_openinference",
    "split",
]

NAME = "otlp"
GENAI = "otel_genai"
OPENINFERENCE = "openinference"
_ERROR = 2
_CHAT_OPS = {"chat", "text_completion", "generate_content"}


def detect(record: Mapping[str, Any]) -> bool:
    """An OTLP export request (spans or logs)."""
    return isinstance(record.get("resourceSpans"), list) or isinstance(
        record.get("resourceLogs"), list
    )


@dataclass
class Span:
    """One decoded span: ids in lowercase hex, attributes as plain Python values."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: datetime | None
    end: datetime | None
    attrs: dict[str, Any]
    error: bool
    depth: int = 0


@dataclass
class Log:
    """One decoded log record (a legacy GenAI event)."""

    trace_id: str
    span_id: str
    name: str
    body: Any
    time: datetime | None
    order: int = 0


@dataclass
class _Items:
    spans: list[Span] = field(default_factory=list)
    logs: list[Log] = field(default_factory=list)


# --- decoding ----------------------------------------------------------------------------------


def _hex_id(value: object, path: str, size: int) -> str:
    if not isinstance(value, str) or not value:
        raise FieldError(path, "INVALID_FIELD", "expected a hex or base64 id")
    lowered = value.lower()
    if len(lowered) == size * 2 and all(c in "0123456789abcdef" for c in lowered):
        return lowered
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FieldError(path, "INVALID_FIELD", "id is neither hex nor base64") from None
    if len(raw) != size:
        raise FieldError(path, "INVALID_FIELD", f"id must be {size} bytes")
    return raw.hex()


# A scalar AnyValue of the wrong JSON type (a list as ``stringValue``) is invalid input, not
# something for the mappers to trip over later. OTLP/JSON writes non-finite doubles as strings.
_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "stringValue": (str,),
    "boolValue": (bool,),
    "doubleValue": (int, float, str),
    "bytesValue": (str,),
}


def _scalar(value: object, types: tuple[type, ...], path: str) -> Any:
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise FieldError(path, "INVALID_FIELD", "wrong type for this AnyValue field")
    return value


def any_value(value: object, path: str) -> Any:
    """Decode an OTLP ``AnyValue`` to a plain value (int64s arrive as strings)."""
    obj = as_obj(value, path)
    if "intValue" in obj:
        try:
            return int(str(obj["intValue"]))
        except ValueError:
            raise FieldError(f"{path}.intValue", "INVALID_FIELD", "not an integer") from None
    for key, types in _SCALAR_TYPES.items():
        if key in obj:
            return _scalar(obj[key], types, f"{path}.{key}")
    if "arrayValue" in obj:
        values = as_obj(obj["arrayValue"], f"{path}.arrayValue").get("values") or []
        return [
            any_value(v, f"{path}.arrayValue.values[{i}]")
            for i, v in enumerate(_list(values, path))
        ]
    if "kvlistValue" in obj:
        values = as_obj(obj["kvlistValue"], f"{path}.kvlistValue").get("values") or []
        return _attributes(values, f"{path}.kvlistValue.values")
    return None


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise FieldError(path, "INVALID_FIELD", "expected a list")
    return value


def _attributes(raw: object, path: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for index, entry in enumerate(_list(raw or [], path)):
        item = as_obj(entry, f"{path}[{index}]")
        key = item.get("key")
        if not isinstance(key, str):
            raise FieldError(f"{path}[{index}].key", "INVALID_FIELD", "expected string")
        attrs[key] = any_value(item.get("value", {}), f"{path}[{index}].value")
    return attrs


def _span(raw: object, path: str) -> Span:
    span = as_obj(raw, path)
    parent = span.get("parentSpanId")
    status = span.get("status")
    code = status.get("code") if isinstance(status, dict) else None
    return Span(
        trace_id=_hex_id(span.get("traceId"), f"{path}.traceId", 16),
        span_id=_hex_id(span.get("spanId"), f"{path}.spanId", 8),
        parent_id=_hex_id(parent, f"{path}.parentSpanId", 8) if parent else None,
        name=str(span.get("name", "")),
        start=utc_from_ns(span.get("startTimeUnixNano", 0)),
        end=utc_from_ns(span.get("endTimeUnixNano", 0)),
        attrs=_attributes(span.get("attributes"), f"{path}.attributes"),
        error=code in (_ERROR, "STATUS_CODE_ERROR"),
    )


def _log(raw: object, path: str) -> Log | None:
    record = as_obj(raw, path)
    attrs = _attributes(record.get("attributes"), f"{path}.attributes")
    name = record.get("eventName") or attrs.get("event.name")
    if not isinstance(name, str) or not name.startswith("gen_ai.") or not record.get("traceId"):
        return None  # not a GenAI event, or not tied to a trace: nothing to import
    return Log(
        trace_id=_hex_id(record.get("traceId"), f"{path}.traceId", 16),
        span_id=_hex_id(record.get("spanId"), f"{path}.spanId", 8),
        name=name,
        body=any_value(record["body"], f"{path}.body") if "body" in record else None,
        time=utc_from_ns(record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0),
    )


def _walk(record: dict[str, Any], outer: str, inner: str, leaf: str) -> Iterator[tuple[str, Any]]:
    for r, resource in enumerate(_list(record.get(outer) or [], outer)):
        scopes = as_obj(resource, f"{outer}[{r}]").get(inner) or []
        for s, scope in enumerate(_list(scopes, f"{outer}[{r}].{inner}")):
            path = f"{outer}[{r}].{inner}[{s}].{leaf}"
            for n, item in enumerate(_list(as_obj(scope, path).get(leaf) or [], path)):
                yield f"{path}[{n}]", item


def split(record: dict[str, Any], session: bool) -> Iterator[Any]:  # noqa: ARG001
    """Items of one export request, keyed by trace id.

    Sessions (several traces of one conversation) are not regrouped here: every trace repeats
    the history, and ``merge`` keeps the longest one of each conversation.
    """

    for path, raw in _walk(record, "resourceSpans", "scopeSpans", "spans"):
        span = _span(raw, path)
        yield Item(span.trace_id, span, closes=span.parent_id is None)
    for path, raw in _walk(record, "resourceLogs", "scopeLogs", "logRecords"):
        log = _log(raw, path)
        if log is not None:
            yield Item(log.trace_id, log)


# --- per trace ---------------------------------------------------------------------------------


def _items(payloads: list[Any]) -> _Items:
    items = _Items()
    for payload in payloads:
        if isinstance(payload, Span):
            items.spans.append(payload)
        else:
            items.logs.append(payload)
    for order, log in enumerate(items.logs):
        log.order = order
    _order(items.spans)
    return items


def _order(spans: list[Span]) -> None:
    """Start time, then depth: export order is end-time order and says nothing causal."""
    by_id = {s.span_id: s for s in spans}
    for span in spans:
        depth, parent, seen = 0, span.parent_id, set()
        while parent in by_id and parent not in seen:
            seen.add(parent)
            depth, parent = depth + 1, by_id[parent].parent_id
        span.depth = depth
    spans.sort(key=lambda s: (s.start.timestamp() if s.start else 0.0, s.depth))


def _is_openinference(items: _Items) -> bool:
    return any("openinference.span.kind" in s.attrs for s in items.spans)


def parse_auto(key: str, payloads: list[Any]) -> list[ParsedTrace]:
    """OpenInference when any span says so, else OTel GenAI."""
    items = _items(payloads)
    if _is_openinference(items):
        return [_openinference(key, items)]
    return [_genai(key, items)]


def parse_genai(key: str, payloads: list[Any]) -> list[ParsedTrace]:
    """Force the OTel GenAI reading."""
    return [_genai(key, _items(payloads))]


def parse_openinference(key: str, payloads: list[Any]) -> list[ParsedTrace]:
    """Force the OpenInference reading."""
    return [_openinference(key, _items(payloads))]


def merge(traces: list[ParsedTrace]) -> list[ParsedTrace]:
    """Keep only the longest history of each conversation (see ``_spans.merge_prefixes``)."""
    return merge_prefixes(traces)


def _trace(
    key: str,
    items: _Items,
    source: str,
    *,
    calls: list[ChatCall],
    tools: list[ToolRun],
    catalog: tuple[Any, ...] | None,
    session: str | None,
) -> ParsedTrace:
    events = tuple(build_events(key, calls, tools))
    ids = {s.span_id for s in items.spans}
    orphan = any(s.parent_id is not None and s.parent_id not in ids for s in items.spans)
    not_ready = None
    if not events:
        not_ready = "NO_CONTENT"
    elif any(s.end is None for s in items.spans):
        not_ready = "SPAN_NOT_ENDED"
    return ParsedTrace(
        trace_id=key,
        events=events,
        source=source,
        tools=catalog,
        extras=Extras(session_id=session),
        not_ready=not_ready,
        issues=(MISSING_PARENT_SPAN,) if orphan else (),
        otel=_otel_ref(key, items),
    )


def _root_span_id(spans: list[Span]) -> str | None:
    """The earliest span without a parent; else the one missing parent every top span names.

    A trace whose root never arrived (a crash) still names its root by id in its top spans'
    ``parentSpanId``; two different missing parents leave the root unknown (``None``).
    """
    roots = [s.span_id for s in spans if s.parent_id is None]  # spans are in start order
    if roots:
        return roots[0]
    ids = {s.span_id for s in spans}
    missing = {s.parent_id for s in spans if s.parent_id is not None and s.parent_id not in ids}
    return missing.pop() if len(missing) == 1 else None


def _otel_ref(key: str, items: _Items) -> OtelRef | None:
    """The trace's OTel ids, when the trace has a root span id and its ids are valid OTel ids."""
    span_id = _root_span_id(items.spans)
    if span_id is None:
        return None
    try:
        return OtelRef(trace_id=key, span_id=span_id)
    except ValueError:  # an all-zero id: not a valid OTel id, nothing to attach events to
        return None


def _json_attr(attrs: Mapping[str, Any], key: str) -> tuple[Any, bool]:
    """(parsed value, present); a value that is not valid JSON is ``TRUNCATED`` (never repaired)."""
    raw = attrs.get(key)
    if raw is None:
        return None, False
    if not isinstance(raw, str):
        return raw, True
    try:
        return json.loads(raw), True
    except ValueError:
        return _CUT, True


_CUT = object()  # sentinel: the attribute was present but cut mid-value


# --- GenAI -------------------------------------------------------------------------------------


def _genai(key: str, items: _Items) -> ParsedTrace:
    chats = [s for s in items.spans if _is_chat(s)]
    calls = [_genai_call(s) for s in chats if _has_messages(s)]
    if not calls and items.logs:
        calls = _legacy_calls(chats or items.spans, items.logs)
    tools = [
        _genai_tool(s)
        for s in items.spans
        if s.attrs.get("gen_ai.operation.name") == "execute_tool"
    ]
    return _trace(
        key,
        items,
        GENAI,
        calls=calls,
        tools=tools,
        catalog=_genai_catalog(items.spans),
        session=_conversation(items.spans),
    )


def _is_chat(span: Span) -> bool:
    operation = span.attrs.get("gen_ai.operation.name")
    return operation in _CHAT_OPS or (operation is None and "gen_ai.input.messages" in span.attrs)


def _has_messages(span: Span) -> bool:
    return "gen_ai.input.messages" in span.attrs or "gen_ai.output.messages" in span.attrs


def _conversation(spans: list[Span]) -> str | None:
    for span in spans:
        for attr in ("gen_ai.conversation.id", "session.id"):
            value = span.attrs.get(attr)
            if isinstance(value, str) and value:
                return value
    return None


def _genai_call(span: Span) -> ChatCall:
    inputs, _ = _json_attr(span.attrs, "gen_ai.input.messages")
    outputs, present = _json_attr(span.attrs, "gen_ai.output.messages")
    system, _ = _json_attr(span.attrs, "gen_ai.system_instructions")
    in_msgs = None if inputs is _CUT else _genai_messages(inputs or [])
    if in_msgs is not None and isinstance(system, list):
        in_msgs = [{"role": "system", "content": _texts(system)}, *in_msgs]
    out_msgs = None if outputs is _CUT else _genai_messages(outputs or [])
    issues: tuple[str, ...] = ()
    if in_msgs is not None and system is _CUT:
        issues = (TRUNCATED_CONTENT,)
    return ChatCall(span.start, span.end, in_msgs, out_msgs if present else [], issues)


def _texts(parts: list[Any]) -> str:
    return "\n".join(
        str(p.get("content", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text"
    )


def _genai_messages(raw: object) -> list[dict[str, Any]] | None:
    """GenAI ``[{role, parts}]`` → Chat Completions-shaped messages (``None`` if malformed)."""
    if not isinstance(raw, list):
        return None
    messages: list[dict[str, Any]] = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("parts"), list):
            return None
        messages.extend(_genai_message(str(entry.get("role")), entry["parts"]))
    return messages


def _genai_message(role: str, parts: list[Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            content.append({"type": "text", "text": str(part.get("content", ""))})
        elif kind == "tool_call":
            calls.append(_genai_tool_call(part))
        elif kind == "tool_call_response":
            results.append(_genai_result(part))
        elif kind != "reasoning":  # reasoning is never evidence (like thinking blocks)
            content.append({"type": str(kind)})
    return _chat_shape(role, content, calls, results)


def _genai_tool_call(part: dict[str, Any]) -> dict[str, Any]:
    arguments = part.get("arguments")
    return {
        "id": part.get("id") if isinstance(part.get("id"), str) else None,
        "type": "function",
        "function": {"name": part.get("name"), "arguments": arguments},
    }


def _genai_result(part: dict[str, Any]) -> dict[str, Any]:
    response = part.get("response")
    text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    call_id = part.get("id") if isinstance(part.get("id"), str) else None
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _chat_shape(
    role: str,
    content: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    results: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    messages = list(results)
    if role == "tool" and not content and not calls:
        return messages
    if content or calls or not results:
        message: dict[str, Any] = {
            "role": role if role != "tool" else "user",
            "content": content or None,
        }
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
    return messages


def _genai_tool(span: Span) -> ToolRun:
    result = span.attrs.get("gen_ai.tool.call.result")
    issues: tuple[str, ...] = ()
    if isinstance(result, str) and _looks_cut(span, "gen_ai.tool.call.result"):
        issues = (TRUNCATED_CONTENT,)
    return ToolRun(
        call_id=_str(span.attrs.get("gen_ai.tool.call.id")),
        name=_str(span.attrs.get("gen_ai.tool.name")),
        result=result if isinstance(result, str) or result is None else json.dumps(result),
        end=span.end,
        error=span.error or "error.type" in span.attrs,
        issues=issues,
    )


def _looks_cut(span: Span, key: str) -> bool:
    value, _ = _json_attr(span.attrs, key)
    return value is _CUT and str(span.attrs.get(key, "")).lstrip()[:1] in ("{", "[", '"')


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _genai_catalog(spans: list[Span]) -> tuple[Any, ...] | None:
    """``gen_ai.tool.definitions`` of the agent (or latest inference) span; never inferred."""
    for span in sorted(spans, key=lambda s: s.depth):
        value, present = _json_attr(span.attrs, "gen_ai.tool.definitions")
        if present and isinstance(value, list):
            return tuple(tool_spec(t, "gen_ai.tool.definitions") for t in value)
    return None


# --- GenAI legacy events -------------------------------------------------------------------------

_LEGACY_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _legacy_calls(spans: list[Span], logs: list[Log]) -> list[ChatCall]:
    """One model call per span that has events: its messages are the input, choices the output."""
    by_span: dict[str, list[Log]] = {}
    for log in sorted(logs, key=lambda lg: lg.order):
        by_span.setdefault(log.span_id, []).append(log)
    order = [s for s in spans if s.span_id in by_span]
    order += [
        Span(logs_[0].trace_id, sid, None, "", logs_[0].time, logs_[-1].time, {}, error=False)
        for sid, logs_ in by_span.items()
        if sid not in {s.span_id for s in spans}
    ]
    return [_legacy_call(span, by_span[span.span_id]) for span in order]


def _legacy_call(span: Span, logs: list[Log]) -> ChatCall:
    inputs = [_legacy_message(lg) for lg in logs if lg.name in _LEGACY_ROLES]
    outputs = [_legacy_choice(lg.body) for lg in logs if lg.name == "gen_ai.choice"]
    return ChatCall(span.start, span.end, inputs, outputs[:1])


def _legacy_message(log: Log) -> dict[str, Any]:
    body = log.body if isinstance(log.body, dict) else {}
    role = _LEGACY_ROLES[log.name]
    message: dict[str, Any] = {"role": role, "content": body.get("content")}
    if role == "tool":
        message["tool_call_id"] = body.get("id")  # in these events ``id`` is the tool_call_id
    if body.get("tool_calls"):
        message["tool_calls"] = body["tool_calls"]
    return message


def _legacy_choice(body: object) -> dict[str, Any]:
    choice = body if isinstance(body, dict) else {}
    raw = choice.get("message")
    message: dict[str, Any] = raw if isinstance(raw, dict) else {}
    result: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        result["tool_calls"] = message["tool_calls"]
    return result


# --- OpenInference -------------------------------------------------------------------------------


def _openinference(key: str, items: _Items) -> ParsedTrace:
    llms = [s for s in items.spans if s.attrs.get("openinference.span.kind") == "LLM"]
    limit = _oi_cut_length(llms)
    calls = [_oi_call(s, limit) for s in llms]
    tools = [
        _oi_tool(s, limit) for s in items.spans if s.attrs.get("openinference.span.kind") == "TOOL"
    ]
    catalog, catalog_cut = _oi_catalog(llms[-1]) if llms else (None, False)
    trace = _trace(
        key,
        items,
        OPENINFERENCE,
        calls=calls,
        tools=tools,
        catalog=catalog,
        session=_conversation(items.spans),
    )
    if catalog_cut:  # a tool's schema was cut: the catalog is not the whole catalog
        return replace(trace, issues=(*trace.issues, TRUNCATED_CONTENT))
    return trace


def _indexed(attrs: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``prefix.N.rest`` attributes → {N: {rest: value}} (numeric N: "10" sorts after "2")."""
    table: dict[int, dict[str, Any]] = {}
    for name, value in attrs.items():
        if not name.startswith(prefix):
            continue
        head, _, rest = name[len(prefix) :].partition(".")
        if head.isdigit() and rest:
            table.setdefault(int(head), {})[rest] = value
    return table


def _oi_cut_length(llms: list[Span]) -> int | None:
    """The attribute length limit the exporter applied, when the trace proves one.

    The instrumentation writes ``input.value``/``output.value`` of LLM spans with
    ``json.dumps`` (mime type ``application/json``), so one that no longer parses was cut by
    ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``, and the SDK cuts every value to exactly that length.
    Any other value that long was cut too, even when what is left still looks whole (prose, or
    JSON that happens to parse).
    """
    lengths = [
        len(span.attrs[key])
        for span in llms
        for key in ("input.value", "output.value")
        if span.attrs.get(f"{key.split('.')[0]}.mime_type") == "application/json"
        and _json_attr(span.attrs, key)[0] is _CUT
    ]
    return min(lengths) if lengths else None


def _oi_cut(value: object, limit: int | None, *, result: bool = False) -> bool:
    """Whether one message/result value was cut (see :func:`_oi_cut_length`).

    A tool result that looks like JSON but does not parse is cut whatever the limit (the care
    the GenAI importer takes with ``gen_ai.tool.call.result``).
    """
    if not isinstance(value, str):
        return False
    if limit is not None and len(value) >= limit:
        return True
    if not result or value.lstrip()[:1] not in ("{", "["):
        return False
    try:
        json.loads(value)
    except ValueError:
        return True
    return False


def _oi_call(span: Span, limit: int | None) -> ChatCall:
    inputs, in_flags = _oi_messages(span.attrs, "llm.input_messages.", limit)
    outputs, out_flags = _oi_messages(span.attrs, "llm.output_messages.", limit)
    return ChatCall(
        span.start,
        span.end,
        inputs,
        outputs,
        input_flags=in_flags,
        output_flags=out_flags,
    )


def _oi_messages(
    attrs: Mapping[str, Any], prefix: str, limit: int | None
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, ...]]]:
    """The messages under ``prefix`` and, by position, ``TRUNCATED_CONTENT`` for cut ones."""
    table = _indexed(attrs, prefix)
    messages: list[dict[str, Any]] = []
    flags: dict[int, tuple[str, ...]] = {}
    for position, index in enumerate(sorted(table)):
        flat = table[index]
        messages.append(_oi_message(flat))
        tool = flat.get("message.role") == "tool"
        if any(_oi_cut(v, limit, result=tool and k == "message.content") for k, v in flat.items()):
            flags[position] = (TRUNCATED_CONTENT,)
    return messages, flags


def _oi_message(flat: dict[str, Any]) -> dict[str, Any]:
    role = _str(flat.get("message.role")) or "user"
    message: dict[str, Any] = {"role": role, "content": _oi_content(flat)}
    if role == "tool":
        message["tool_call_id"] = flat.get("message.tool_call_id")
    calls = _oi_tool_calls(flat)
    if calls:
        message["tool_calls"] = calls
    return message


def _oi_tool_calls(flat: dict[str, Any]) -> list[dict[str, Any]]:
    """``message.tool_calls.*``, plus tool-use content parts not already among them.

    openinference-instrumentation-anthropic writes each ``tool_use`` block twice: under
    ``message.tool_calls.J.tool_call.*`` and as ``message.contents.K`` with
    ``message_content.type = "tool_use"`` and the same ``tool_call.*`` keys. One call is one
    call: a part whose id is already listed adds nothing.
    """
    listed = _indexed(flat, "message.tool_calls.")
    calls = [_oi_function(listed[j]) for j in sorted(listed)]
    ids = {c["id"] for c in calls if c["id"]}
    parts = _indexed(flat, "message.contents.")
    for k in sorted(parts):
        part = parts[k]
        if part.get("message_content.type") not in _OI_CALL_PARTS:
            continue
        call = _oi_function(part)
        if not calls or (call["id"] and call["id"] not in ids):
            calls.append(call)
            ids.add(call["id"])
    return calls


_OI_CALL_PARTS = ("tool_use", "tool_call")


def _oi_function(flat: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": flat.get("tool_call.id"),
        "type": "function",
        "function": {
            "name": flat.get("tool_call.function.name"),
            "arguments": flat.get("tool_call.function.arguments"),
        },
    }


def _oi_content(flat: dict[str, Any]) -> Any:
    if "message.content" in flat:
        return flat["message.content"]
    parts = _indexed(flat, "message.contents.")
    content = []
    for k in sorted(parts):
        kind = parts[k].get("message_content.type")
        if kind == "text":
            content.append({"type": "text", "text": str(parts[k].get("message_content.text", ""))})
        elif kind not in _OI_CALL_PARTS:  # tool-use parts are calls (see _oi_tool_calls)
            content.append({"type": str(kind)})
    return content or None


def _oi_tool(span: Span, limit: int | None) -> ToolRun:
    result = span.attrs.get("output.value")
    return ToolRun(
        call_id=_str(span.attrs.get("tool.id")) or _str(span.attrs.get("tool_call.id")),
        name=_str(span.attrs.get("tool.name")),
        result=result if isinstance(result, str) else None,
        end=span.end,
        error=span.error,
        issues=(TRUNCATED_CONTENT,) if _oi_cut(result, limit, result=True) else (),
    )


def _oi_catalog(span: Span) -> tuple[tuple[Any, ...] | None, bool]:
    """The catalog of the latest LLM span, and whether a tool's schema in it was cut."""
    table = _indexed(span.attrs, "llm.tools.")
    if table:
        specs = []
        cut = False
        for i in sorted(table):
            schema, _ = _json_attr(table[i], "tool.json_schema")
            cut = cut or schema is _CUT
            if isinstance(schema, dict):
                specs.append(tool_spec(schema, f"llm.tools.{i}.tool.json_schema"))
        return tuple(specs), cut
    request, _ = _json_attr(span.attrs, "input.value")  # an empty list leaves no llm.tools.*
    if isinstance(request, dict) and isinstance(request.get("tools"), list):
        return tuple(tool_spec(t, "input.value.tools") for t in request["tools"]), False
    return None, False
