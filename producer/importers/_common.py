"""Building blocks shared by the importers: typed field access, content, arguments, events.

Every importer turns one source record (or one group of spans/runs) into a :class:`ParsedTrace`:
normalized events in causal order plus the catalog and the record's optional extras. Invalid
input raises :class:`FieldError` naming the JSON path of the offending field; nothing else may
escape an importer for malformed input (the reader turns a ``FieldError`` into a rejected line).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from producer.snapshot import (
    Event,
    EventType,
    GoldLabel,
    OtelRef,
    SliceMeta,
    ToolRound,
    ToolSpec,
)

__all__ = [
    "AMBIGUOUS_CALL_ID",
    "TRUNCATED_CONTENT",
    "UNPAIRED_TOOL_RESULT",
    "UNSUPPORTED_MESSAGE_CONTENT",
    "UNSUPPORTED_TOOL_CONTENT",
    "EventBuilder",
    "Extras",
    "FieldError",
    "Item",
    "ParsedTrace",
    "as_obj",
    "content_text",
    "opt_list",
    "opt_obj",
    "opt_str",
    "parse_arguments",
    "read_extras",
    "req_list",
    "req_obj",
    "req_str",
    "text_of",
    "tool_spec",
    "tool_specs",
    "utc_from_unix_s",
]

# Importer issue codes (the engine's names where one exists, docs/semantics.md §1): any of them
# makes the trace INCOMPLETE, so the worker skips it instead of judging broken evidence.
AMBIGUOUS_CALL_ID = "AMBIGUOUS_CALL_ID"  # a call without an id, or an id seen twice
UNPAIRED_TOOL_RESULT = "UNPAIRED_TOOL_RESULT"  # a result whose call is absent or already paired
UNSUPPORTED_TOOL_CONTENT = "UNSUPPORTED_TOOL_CONTENT"  # image/file/... parts in a tool result
UNSUPPORTED_MESSAGE_CONTENT = "UNSUPPORTED_MESSAGE_CONTENT"  # image/audio/... parts in a message
TRUNCATED_CONTENT = "TRUNCATED_CONTENT"  # the exporter cut the value (invalid JSON, length limit)


class FieldError(ValueError):
    """Malformed input: ``field`` is a JSON path (``messages[2].role``), ``code`` a reason."""

    def __init__(self, field: str, code: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.code = code
        self.message = message


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _typed(obj: Mapping[str, Any], key: str, path: str, kind: type, required: bool) -> Any:
    value = obj.get(key)
    if value is None:
        if required:
            raise FieldError(_at(path, key), "MISSING_FIELD", "required field is missing")
        return None
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise FieldError(
            _at(path, key), "INVALID_FIELD", f"expected {kind.__name__}, got {_kind(value)}"
        )
    return value


def req_str(obj: Mapping[str, Any], key: str, path: str = "") -> str:
    """A required string field."""
    value: str = _typed(obj, key, path, str, required=True)
    return value


def opt_str(obj: Mapping[str, Any], key: str, path: str = "") -> str | None:
    """An optional string field (absent or null gives ``None``)."""
    value: str | None = _typed(obj, key, path, str, required=False)
    return value


def req_list(obj: Mapping[str, Any], key: str, path: str = "") -> list[Any]:
    """A required list field."""
    value: list[Any] = _typed(obj, key, path, list, required=True)
    return value


def opt_list(obj: Mapping[str, Any], key: str, path: str = "") -> list[Any] | None:
    """An optional list field."""
    value: list[Any] | None = _typed(obj, key, path, list, required=False)
    return value


def req_obj(obj: Mapping[str, Any], key: str, path: str = "") -> dict[str, Any]:
    """A required object field."""
    value: dict[str, Any] = _typed(obj, key, path, dict, required=True)
    return value


def opt_obj(obj: Mapping[str, Any], key: str, path: str = "") -> dict[str, Any] | None:
    """An optional object field."""
    value: dict[str, Any] | None = _typed(obj, key, path, dict, required=False)
    return value


def text_of(obj: Mapping[str, Any], key: str = "type") -> str | None:
    """A discriminator such as ``type``/``role``/``status``: its string value, else ``None``.

    Lookups in sets and dicts need hashable keys; a malformed list or object value must read as
    "unknown", not crash the importer.
    """
    value = obj.get(key)
    return value if isinstance(value, str) else None


def as_obj(value: object, path: str) -> dict[str, Any]:
    """``value`` itself, which must be an object."""
    if not isinstance(value, dict):
        raise FieldError(path, "INVALID_FIELD", f"expected object, got {_kind(value)}")
    return value


# --- content ---------------------------------------------------------------------------------

_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


def content_text(content: object, path: str, *, unsupported: str) -> tuple[str | None, list[str]]:
    """Text of a message/result ``content`` (string or parts) and issue codes for other parts.

    Text parts are joined with ``"\\n"`` (as AgentScope joins blocks); each non-text part adds
    ``unsupported`` once per part, and its text siblings are still kept.
    """
    if content is None or isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise FieldError(path, "INVALID_FIELD", f"expected string or list, got {_kind(content)}")
    texts: list[str] = []
    issues: list[str] = []
    for index, part in enumerate(content):
        text = _part_text(part, _at(path, index))
        if text is None:
            issues.append(unsupported)
        else:
            texts.append(text)
    return ("\n".join(texts) if texts else None), issues


def _part_text(part: object, path: str) -> str | None:
    if isinstance(part, str):
        return part
    obj = as_obj(part, path)
    key = _TEXT_PARTS.get(str(obj.get("type", "text")))
    if key is None:
        return None
    value = obj.get(key)
    if value is None and key == "text":
        value = obj.get("content")  # OTel-style {"type": "text", "content": ...}
    if not isinstance(value, str):
        raise FieldError(_at(path, key), "INVALID_FIELD", f"expected string, got {_kind(value)}")
    return value


def parse_arguments(raw: object) -> tuple[Any, list[str]]:
    """Parsed tool arguments; an unparsable string is kept raw (the projection flags it)."""
    if not isinstance(raw, str):
        return raw, []
    try:
        return json.loads(raw, parse_constant=_no_constant), []
    except (ValueError, RecursionError):
        return raw, []


def _no_constant(name: str) -> None:
    raise ValueError(name)


# --- catalog ---------------------------------------------------------------------------------


def tool_spec(entry: object, path: str) -> ToolSpec:
    """One tool from any provider's catalog entry (OpenAI chat/Responses, Anthropic, OTel)."""
    obj = as_obj(entry, path)
    inner = obj.get("function")
    if isinstance(inner, dict):  # Chat Completions: {"type": "function", "function": {...}}
        obj, path = inner, _at(path, "function")
    name = opt_str(obj, "name", path)
    if name is None:  # built-in tools ({"type": "web_search"}) are named by their type
        name = req_str(obj, "type", path)
    description = opt_str(obj, "description", path) or ""
    params = obj.get("parameters", obj.get("input_schema", obj.get("params_json_schema")))
    return ToolSpec(name=name, description=description, parameters=params)


def tool_specs(entries: object, path: str) -> tuple[ToolSpec, ...] | None:
    """A catalog: ``None`` when not recorded, ``()`` when recorded empty (never inferred)."""
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise FieldError(path, "INVALID_FIELD", f"expected list, got {_kind(entries)}")
    return tuple(tool_spec(entry, _at(path, i)) for i, entry in enumerate(entries))


# --- extras ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Extras:
    """Optional record fields that ride along with every snapshot of the record."""

    contexts: tuple[Any, ...] | None = None
    claims: tuple[str, ...] | None = None
    expected_tool_calls: tuple[Any, ...] | None = None
    labels: Mapping[str, GoldLabel] = field(default_factory=lambda: MappingProxyType({}))
    slice: SliceMeta = field(default_factory=SliceMeta)
    session_id: str | None = None


_SLICE_KEYS = ("agent_version", "environment", "tool")


def read_extras(record: Mapping[str, Any], path: str = "") -> Extras:
    """Read the optional ``metadata``, ``labels``, ``contexts``, ``claims``,
    ``expected_tool_calls`` and ``session_id`` fields of a record."""
    metadata = opt_obj(record, "metadata", path) or {}
    meta_path = _at(path, "metadata")
    slice_values = {k: opt_str(metadata, k, meta_path) for k in _SLICE_KEYS}
    session = opt_str(record, "session_id", path) or opt_str(metadata, "session_id", meta_path)
    claims = opt_list(record, "claims", path)
    if claims is not None:
        claims = [_claim(c, _at(_at(path, "claims"), i)) for i, c in enumerate(claims)]
    return Extras(
        contexts=_tuple(opt_list(record, "contexts", path)),
        claims=_tuple(claims),
        expected_tool_calls=_tuple(opt_list(record, "expected_tool_calls", path)),
        labels=_labels(opt_obj(record, "labels", path) or {}, _at(path, "labels")),
        slice=SliceMeta(**slice_values),
        session_id=session,
    )


def _claim(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise FieldError(path, "INVALID_FIELD", f"expected string, got {_kind(value)}")
    return value


def _tuple(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(values)


def _labels(raw: Mapping[str, Any], path: str) -> Mapping[str, GoldLabel]:
    labels: dict[str, GoldLabel] = {}
    for key, value in raw.items():
        entry = as_obj(value, _at(path, key))
        passed = _typed(entry, "passed", _at(path, key), bool, required=False)
        label = opt_str(entry, "label", _at(path, key))
        if (passed is None) == (label is None):
            raise FieldError(_at(path, key), "INVALID_LABEL", "set exactly one of passed/label")
        labels[key] = GoldLabel(passed=passed, label=label)
    return MappingProxyType(labels)


# --- the normalized result ---------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One span/log/run of a group format: ``key`` groups it, ``closes`` marks a finished root."""

    key: str
    payload: Any
    closes: bool = False


@dataclass(frozen=True)
class ParsedTrace:
    """One trace, normalized: events in causal order, the catalog and the record's extras.

    ``issues`` are trace-level codes (e.g. from a fields record) that every snapshot carries on
    its first event. ``not_ready`` names why the trace shows in-flight work (an unfinished run,
    an unended parent span, a response still in progress); such a trace is never snapshotted.
    ``otel`` is the OpenTelemetry trace and root span the trace came from (OTLP importers only):
    provenance every snapshot of the trace carries, never evidence.
    """

    trace_id: str
    events: tuple[Event, ...]
    source: str
    tools: tuple[ToolSpec, ...] | None = None
    tool_rounds: tuple[ToolRound, ...] | None = None
    extras: Extras = field(default_factory=Extras)
    not_ready: str | None = None
    issues: tuple[str, ...] = ()  # trace-level codes (no event of their own)
    otel: OtelRef | None = None


class EventBuilder:
    """Appends normalized events with deterministic ids ``f"{trace_id}:{n}"`` and pairs results.

    Pairing is by call id only (docs/formats.md): a result whose id names no earlier call,
    or a call that already has a result, is kept but flagged ``UNPAIRED_TOOL_RESULT``; a call
    with no id, or an id seen before, is flagged ``AMBIGUOUS_CALL_ID``.
    """

    def __init__(self, trace_id: str) -> None:
        self.trace_id = trace_id
        self.events: list[Event] = []
        self._calls: dict[str, str] = {}  # call id -> tool name
        self._answered: set[str] = set()

    def _next_id(self) -> str:
        return f"{self.trace_id}:{len(self.events)}"

    def add(self, type_: EventType, **fields: Any) -> str:
        """Append one event and return its id."""
        event = Event(id=self._next_id(), type=type_, **fields)
        self.events.append(event)
        return event.id

    def message(
        self,
        type_: EventType,
        text: str | None,
        issues: Iterable[str] = (),
        timestamp: datetime | None = None,
    ) -> str:
        """A system/user/assistant message."""
        return self.add(type_, text=text, issues=tuple(issues), timestamp=timestamp)

    def call(
        self,
        parent_id: str | None,
        call_id: str | None,
        name: str | None,
        arguments: object,
        *,
        timestamp: datetime | None = None,
        issues: Iterable[str] = (),
    ) -> str:
        """A proposed tool call, child of the assistant event ``parent_id``."""
        flags = list(issues)
        if not call_id or call_id in self._calls:
            flags.append(AMBIGUOUS_CALL_ID)
        else:
            self._calls[call_id] = name or ""
        return self.add(
            EventType.TOOL_CALL,
            tool_name=name,
            arguments=arguments,
            call_id=call_id or None,
            parent_id=parent_id,
            timestamp=timestamp,
            issues=tuple(flags),
        )

    def result(
        self,
        call_id: str | None,
        text: str | None,
        issues: Iterable[str] = (),
        *,
        status: str | None = None,
        timestamp: datetime | None = None,
    ) -> str:
        """A tool result paired by call id (an error result is a result, with ``status``)."""
        flags = list(issues)
        name = self._calls.get(call_id) if call_id else None
        if name is None or call_id in self._answered:
            flags.append(UNPAIRED_TOOL_RESULT)
        elif call_id is not None:
            self._answered.add(call_id)
        return self.add(
            EventType.TOOL_RESULT,
            text=text,
            tool_name=name or None,
            call_id=call_id or None,
            status=status,
            timestamp=timestamp,
            issues=tuple(flags),
        )

    def known_call(self, call_id: str) -> bool:
        """Whether a call with this id was already recorded."""
        return call_id in self._calls

    def answered(self, call_id: str) -> bool:
        """Whether the call with this id already has a result."""
        return call_id in self._answered


def utc_from_unix_s(value: object) -> datetime | None:
    """A UTC datetime from unix seconds (``None`` when absent or not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
