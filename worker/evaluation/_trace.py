"""The trace model (docs/semantics.md §1): an id, read-only JSON fields and integrity issues.

:meth:`Trace.from_messages` normalizes OpenAI chat-format messages by the AgentScope rules
(docs/semantics.md §1). Evidence comes only from text parts, tool calls and tool results; reasoning
parts, ``reasoning_content`` and any other message metadata are dropped silently. Anything the rules
cannot pair or read becomes an issue code, which makes the trace incomplete (every metric is then
SKIPPED ``INCOMPLETE_TRACE``); malformed *input* (not a list of objects, an unknown role, a content
that is neither text, null nor a list of parts) raises ``ValueError``.

Decisions where the contract is silent (documented for users of the OpenAI format):

- ``developer`` is accepted as the newer name of ``system``.
- Text parts are ``text``/``input_text``/``output_text`` parts (or bare strings), joined with
  ``"\n"``; ``thinking``/``reasoning``/``redacted_thinking`` parts are skipped silently.
- ``function.arguments`` may be a JSON string or an already-parsed object; a missing/null value
  means ``{}``. Anything that does not parse to a JSON object is ``INVALID_TOOL_ARGUMENTS`` and
  the raw value is kept as the call's ``arguments``.
- A call without a function name is registered with name ``""`` and flagged
  ``MISSING_TOOL_NAME``; a call whose ``type`` is not ``function`` (e.g. ``custom``) is
  ``UNSUPPORTED_MESSAGE_CONTENT`` and ignored.
- ``result_state`` is ``"UNKNOWN"`` unless the tool message says otherwise: ``is_error``
  (true → ``ERROR``, false → ``SUCCESS``) or a ``status`` name, upper-cased (``"error"`` →
  ``ERROR``, ``"success"`` → ``SUCCESS``); a status that is not a plain word is ignored.
- A refusal (an assistant ``refusal`` string, or a ``refusal`` content part) is text: a model
  that refuses has answered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NoReturn

from worker.canonical_json import JsonValue, canonical_json, freeze, freeze_reusing, thaw

__all__ = ["Trace"]

AMBIGUOUS_CALL_ID = "AMBIGUOUS_CALL_ID"
UNPAIRED_TOOL_RESULT = "UNPAIRED_TOOL_RESULT"
PENDING_TOOL_CALL = "PENDING_TOOL_CALL"
UNSUPPORTED_MESSAGE_CONTENT = "UNSUPPORTED_MESSAGE_CONTENT"
UNSUPPORTED_TOOL_CONTENT = "UNSUPPORTED_TOOL_CONTENT"
INVALID_TOOL_ARGUMENTS = "INVALID_TOOL_ARGUMENTS"
MISSING_TOOL_NAME = "MISSING_TOOL_NAME"

_ROLES = {
    "user": "USER",
    "assistant": "ASSISTANT",
    "system": "SYSTEM",
    "developer": "SYSTEM",
    "tool": "TOOL",
}
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_SILENT_PARTS = frozenset({"thinking", "reasoning", "redacted_thinking"})
_STATE_NAME = re.compile(r"[A-Za-z][A-Za-z_]{0,31}")


class Trace:
    """An immutable trace: ``id``, read-only ``fields`` (frozen JSON) and ``issues`` codes.

    ``fields`` are deep-copied through a JSON round trip, so later changes to the caller's
    objects never leak in, and every nested map/list is read-only (mappings and tuples).
    """

    __slots__ = ("_fields", "_id", "_issues", "_present")

    _id: str
    _fields: Mapping[str, JsonValue]
    _issues: tuple[str, ...]
    _present: frozenset[str]  # the keys `has` is true for (fields never change)

    def __init__(
        self, trace_id: str, fields: Mapping[str, Any], issues: Iterable[str] = ()
    ) -> None:
        self._init(_check_id(trace_id), _freeze_fields(fields), _check_issues(issues))

    def _init(
        self, trace_id: str, fields: Mapping[str, JsonValue], issues: tuple[str, ...]
    ) -> None:
        """Set the slots from a checked id, frozen fields and checked issues."""
        object.__setattr__(self, "_id", trace_id)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_present", _present(fields))
        object.__setattr__(self, "_issues", issues)

    @classmethod
    def from_fields(
        cls, trace_id: str, fields: Mapping[str, Any], issues: Iterable[str] = ()
    ) -> Trace:
        """A trace from a ready field map (own formats, offline datasets)."""
        return cls(trace_id, fields, issues)

    @classmethod
    def from_messages(
        cls,
        trace_id: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Trace:
        """Normalize OpenAI chat-format messages (and an optional tool catalog): semantics §1."""
        fields, issues = _normalized(messages, tools)
        return cls(trace_id, fields, issues)

    @classmethod
    def from_frozen_parts(
        cls,
        trace_id: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        fields: Mapping[str, Any] | None = None,
        issues: Iterable[str] = (),
    ) -> Trace:
        """``from_messages(trace_id, messages, tools).extended(fields, issues)`` in one step, for
        input whose read-only mappings and tuples are already frozen (:func:`freeze` output).

        The same trace rules apply; only the copying differs: those parts (call arguments given as
        mappings, tool parameters, ``fields`` values) are kept instead of being copied again, so
        a caller holding frozen values (``Snapshot.trace()``) need not thaw them first. Passing
        a proxy over a dict that is still mutable would make the trace mutable: don't.
        """
        normalized, found = _normalized(messages, tools)
        checked_id = _check_id(trace_id)
        added = _field_map({} if fields is None else fields)
        frozen: Mapping[str, JsonValue] = freeze_reusing({**normalized, **added})
        trace = object.__new__(cls)
        trace._init(checked_id, frozen, tuple(found) + _check_issues(issues))
        return trace

    def extended(self, fields: Mapping[str, Any], issues: Iterable[str] = ()) -> Trace:
        """A new trace with ``fields`` added (replacing same-named ones) and ``issues`` appended.

        Only the new fields are frozen: this trace's are already read-only copies.
        """
        trace = object.__new__(Trace)
        object.__setattr__(trace, "_id", self._id)
        added = _freeze_fields(fields)
        object.__setattr__(trace, "_fields", MappingProxyType({**self._fields, **added}))
        # Only the new fields are looked at: a replaced key is decided by its new value.
        object.__setattr__(trace, "_present", (self._present - added.keys()) | _present(added))
        object.__setattr__(trace, "_issues", self._issues + _check_issues(issues))
        return trace

    @property
    def id(self) -> str:
        """The non-blank trace id."""
        return self._id

    @property
    def fields(self) -> Mapping[str, JsonValue]:
        """Read-only field map (nested maps are read-only, lists are tuples)."""
        return self._fields

    @property
    def issues(self) -> tuple[str, ...]:
        """Integrity issue codes in the order found (duplicates kept). Non-empty = incomplete."""
        return self._issues

    def has(self, key: str) -> bool:
        """True iff the value is non-null and not a blank string (``[]`` counts as present)."""
        return key in self._present  # decided once per trace: metrics ask for every key

    def text(self, key: str) -> str:
        """The string value, or ``""`` when absent or not a string."""
        value = self._fields.get(key)
        return value if isinstance(value, str) else ""

    def list(self, key: str) -> tuple[JsonValue, ...]:
        """The list value (a tuple), or ``()`` when absent or not a list."""
        value = self._fields.get(key)
        return value if isinstance(value, tuple) else ()

    def with_field(self, key: str, value: Any) -> Trace:
        """A new trace with one field set (issues kept)."""
        return self.extended({key: value})

    def with_issues(self, *codes: str) -> Trace:
        """A new trace with ``codes`` appended to the issues."""
        return self.extended({}, codes)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Trace is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Trace is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        # Field *names* only: traces hold user content that must not end up in logs.
        return f"Trace(id={self._id!r}, fields={sorted(self._fields)!r}, issues={self._issues!r})"

    def __reduce__(self) -> tuple[type[Trace], tuple[str, dict[str, Any], tuple[str, ...]]]:
        return (Trace, (self._id, thaw(self._fields), self._issues))

    def _key(self) -> tuple[str, str, tuple[str, ...]]:
        # Canonical JSON, not ==: True, 1 and 1.0 are different values in a trace.
        return (self._id, canonical_json(self._fields), self._issues)


def _invalid(message: str) -> NoReturn:
    """Invalid input is a ``ValueError`` everywhere in the engine (the public contract)."""
    raise ValueError(message)


def _check_id(trace_id: object) -> str:
    if not isinstance(trace_id, str) or not trace_id.strip():
        _invalid("trace id must be a non-blank string")
    return trace_id


def _present(fields: Mapping[str, JsonValue]) -> frozenset[str]:
    """Keys whose value is non-null and not a blank string."""
    return frozenset(
        key
        for key, value in fields.items()
        if value is not None and (not isinstance(value, str) or value.strip())
    )


def _freeze_fields(fields: object) -> Mapping[str, JsonValue]:
    frozen: Mapping[str, JsonValue] = freeze(_field_map(fields))
    return frozen


def _field_map(fields: object) -> dict[str, Any]:
    """A fresh dict of the fields (not frozen yet), after checking it is one."""
    if not isinstance(fields, Mapping):
        _invalid("trace fields must be a mapping of str to JSON values")
    if not all(isinstance(key, str) for key in fields):
        _invalid("trace field names must be strings")
    return dict(fields)


def _check_issues(issues: object) -> tuple[str, ...]:
    if isinstance(issues, str) or not isinstance(issues, Iterable):
        _invalid("issues must be an iterable of issue codes")
    codes = tuple(issues)
    if not all(isinstance(code, str) and code.strip() for code in codes):
        _invalid("every issue must be a non-blank string code")
    return codes


def _normalized(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> tuple[dict[str, Any], list[str]]:
    """The canonical fields (not frozen yet) and the issues found, in order."""
    builder = _Builder()
    for index, message in enumerate(_check_messages(messages)):
        builder.add(index, message)
    fields = builder.fields()
    if tools is not None:
        fields["available_tools"] = _catalog(tools)
    return fields, builder.finish()


def _check_messages(messages: object) -> Sequence[Mapping[str, Any]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        _invalid("messages must be a list of message objects")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            _invalid(f"messages[{index}] must be an object")
    return messages


def _role(index: int, message: Mapping[str, Any]) -> str:
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        known = ", ".join(_ROLES)
        _invalid(f"messages[{index}].role must be one of {known}")
    return _ROLES[role]


def _content_text(where: str, content: object, issues: list[str], code: str) -> str:
    """Text of a content value; non-text parts add ``code``, reasoning parts are skipped."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, str | bytes) or not isinstance(content, Sequence):
        _invalid(f"{where}.content must be a string, null or a list of parts")
    texts = []
    for position, part in enumerate(content):
        text = _part_text(f"{where}.content[{position}]", part, issues, code)
        if text is not None:
            texts.append(text)
    return "\n".join(texts)


def _part_text(where: str, part: object, issues: list[str], code: str) -> str | None:
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        _invalid(f"{where} must be an object or a string")
    kind = part.get("type")
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return str(part["refusal"])
    if kind in _TEXT_PARTS:
        text = part.get("text")
        if not isinstance(text, str):
            _invalid(f"{where}.text must be a string")
        return text
    if kind not in _SILENT_PARTS:
        issues.append(code)
    return None


def _parse_arguments(raw: object) -> tuple[JsonValue, bool]:
    """``(arguments, valid)``: a JSON object is valid; anything else is kept raw."""
    if raw is None:
        return {}, True
    if isinstance(raw, Mapping):
        return raw, True
    if not isinstance(raw, str):
        return raw, False
    try:
        parsed = json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        return raw, False
    return (parsed, True) if isinstance(parsed, dict) else (raw, False)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name} is not JSON")


def _result_state(message: Mapping[str, Any]) -> str:
    is_error = message.get("is_error")
    if isinstance(is_error, bool):
        return "ERROR" if is_error else "SUCCESS"
    status = message.get("status")
    if isinstance(status, str) and _STATE_NAME.fullmatch(status.strip()):
        return status.strip().upper()
    return "UNKNOWN"


def _catalog(tools: object) -> list[dict[str, Any]]:
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        _invalid("tools must be a list of tool objects (or None)")
    return [_tool_spec(index, tool) for index, tool in enumerate(tools)]


def _tool_spec(index: int, tool: object) -> dict[str, Any]:
    """``{name, description, parameters}`` from OpenAI style or a plain spec."""
    if not isinstance(tool, Mapping):
        _invalid(f"tools[{index}] must be an object")
    spec = tool.get("function", tool)
    if not isinstance(spec, Mapping):
        _invalid(f"tools[{index}].function must be an object")
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        _invalid(f"tools[{index}] needs a non-blank name")
    description = spec.get("description")
    parameters = spec.get("parameters")
    return {
        "name": name,
        "description": description if isinstance(description, str) else "",
        "parameters": {} if parameters is None else parameters,
    }


class _Builder:
    """Walks the messages once, in order, applying the pairing rules (docs/semantics.md §1)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, str]] = []
        self.calls: dict[str, dict[str, Any]] = {}
        self.issues: list[str] = []
        self.seen_ids: set[str] = set()
        self.made_calls: list[bool] = []  # per message: an assistant turn with tool-use blocks

    def add(self, index: int, message: Mapping[str, Any]) -> None:
        role = _role(index, message)
        made_calls = False
        if role == "TOOL":
            text = self._tool_result(index, message)
        else:
            where, content = f"messages[{index}]", message.get("content")
            text = _content_text(where, content, self.issues, UNSUPPORTED_MESSAGE_CONTENT)
        if role == "ASSISTANT":
            text = text or _refusal(message)
            made_calls = self._tool_calls(index, message.get("tool_calls"))
        self.messages.append({"role": role, "text": text})
        self.made_calls.append(made_calls)

    def _tool_calls(self, index: int, calls: object) -> bool:
        if calls is None:
            return False
        where = f"messages[{index}].tool_calls"
        if isinstance(calls, str | bytes) or not isinstance(calls, Sequence):
            _invalid(f"{where} must be a list")
        for position, call in enumerate(calls):
            if not isinstance(call, Mapping):
                _invalid(f"{where}[{position}] must be an object")
            self._register(index, call, f"{where}[{position}]")
        return len(calls) > 0

    def _register(self, index: int, call: Mapping[str, Any], where: str) -> None:
        if call.get("type") not in (None, "function"):
            self.issues.append(UNSUPPORTED_MESSAGE_CONTENT)
            return
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id.strip() or call_id in self.seen_ids:
            self.issues.append(AMBIGUOUS_CALL_ID)
            return
        self.seen_ids.add(call_id)
        function = call.get("function")
        if not isinstance(function, Mapping):
            _invalid(f"{where}.function must be an object")
        self.calls[call_id] = {
            "id": call_id,
            "name": self._name(function.get("name"), where),
            "arguments": self._arguments(function.get("arguments")),
            "message_index": index,
        }

    def _name(self, name: object, where: str) -> str:
        if name is not None and not isinstance(name, str):
            _invalid(f"{where}.function.name must be a string")
        if not name or not name.strip():
            self.issues.append(MISSING_TOOL_NAME)
            return ""
        return name

    def _arguments(self, raw: object) -> JsonValue:
        arguments, valid = _parse_arguments(raw)
        if not valid:
            self.issues.append(INVALID_TOOL_ARGUMENTS)
        return arguments

    def _tool_result(self, index: int, message: Mapping[str, Any]) -> str:
        """Attach the result to its call and return the text (an unpaired block is ignored)."""
        found: list[str] = []
        where = f"messages[{index}]"
        text = _content_text(where, message.get("content"), found, UNSUPPORTED_TOOL_CONTENT)
        call = self.calls.get(_str_or_none(message.get("tool_call_id")) or "")
        name = _str_or_none(message.get("name"))
        if call is None or "result" in call or (name and name != call["name"]):
            self.issues.append(UNPAIRED_TOOL_RESULT)
            return text
        self.issues.extend(found)
        call["result"] = text
        call["result_state"] = _result_state(message)
        call["result_message_index"] = index
        return text

    def fields(self) -> dict[str, Any]:
        calls = list(self.calls.values())
        return {
            "request": self._request(),
            "final_answer": self._final_answer(),
            "messages": self.messages,
            "tool_calls": calls,
            "tool_results": [call for call in calls if "result" in call],
        }

    def finish(self) -> list[str]:
        if any("result" not in call for call in self.calls.values()):
            self.issues.append(PENDING_TOOL_CALL)
        return self.issues

    def _request(self) -> str:
        for message in reversed(self.messages):
            if message["role"] == "USER" and message["text"].strip():
                return message["text"]
        return ""

    def _final_answer(self) -> str:
        # The last assistant turn after the last user message; "" if that turn called tools.
        for index in range(len(self.messages) - 1, -1, -1):
            role = self.messages[index]["role"]
            if role == "USER":
                return ""
            if role == "ASSISTANT":
                return "" if self.made_calls[index] else self.messages[index]["text"]
        return ""


def _refusal(message: Mapping[str, Any]) -> str:
    refusal = message.get("refusal")
    return refusal if isinstance(refusal, str) else ""


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
