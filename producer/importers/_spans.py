"""Shared machinery of the span/run formats: chat-history reconstruction and trace merging.

Span-based exporters (OTel GenAI, OpenInference, LangSmith) repeat the whole chat history on
every model call. Each format reduces its spans to :class:`ChatCall` objects (the call's input
and output as Chat Completions-shaped message dicts); :func:`build_events` takes the history of
the latest call whose input is intact, appends its output, fills results of still-unanswered
calls from tool spans, and normalizes everything through the Chat Completions importer, so the
same conversation gives the same events whichever exporter recorded it.

:func:`merge_prefixes` drops a trace whose events are a strict prefix of another trace of the
same conversation: a raw instrumented SDK makes every model call its own trace, and multi-turn
sessions repeat earlier turns in later traces, so only the longest history is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from producer.snapshot import Event, EventType
from worker.canonical_json import canonical_json

from ._common import TRUNCATED_CONTENT, EventBuilder, ParsedTrace
from .openai_chat import add_message

__all__ = [
    "MISSING_PARENT_SPAN",
    "ChatCall",
    "ToolRun",
    "build_events",
    "merge_prefixes",
    "utc_from_ns",
    "with_session",
]

MISSING_PARENT_SPAN = "MISSING_PARENT_SPAN"  # a parent that never ended (crash): incomplete


@dataclass
class ChatCall:
    """One model call: its input history and output messages (``None`` when cut/unparsable)."""

    start: datetime | None
    end: datetime | None
    inputs: list[dict[str, Any]] | None
    outputs: list[dict[str, Any]] | None
    output_issues: tuple[str, ...] = ()
    # Per-message codes by position in ``inputs``/``outputs`` (e.g. a value cut by a limit).
    input_flags: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    output_flags: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class ToolRun:
    """One tool execution span/run: call id, result text, error flag, issues."""

    call_id: str | None
    name: str | None
    result: str | None
    end: datetime | None
    error: bool = False
    issues: tuple[str, ...] = field(default_factory=tuple)


def utc_from_ns(value: object) -> datetime | None:
    """A UTC datetime from OTLP nanoseconds (a decimal string or an int; 0 means unset)."""
    try:
        nanos = int(str(value))
    except ValueError:
        return None
    if nanos <= 0:
        return None
    try:
        return datetime.fromtimestamp(nanos / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def build_events(trace_id: str, calls: Sequence[ChatCall], tools: Sequence[ToolRun]) -> list[Event]:
    """Events of one trace from its model calls (in start order) and tool runs.

    A call whose input was cut contributes its output flagged ``TRUNCATED_CONTENT`` (the tool
    results it was given are lost with the input); a missing output (``outputs is None``: cut,
    or the call never returned) becomes an empty assistant event flagged with the call's
    ``output_issues`` (``TRUNCATED_CONTENT`` when it has none). Nothing is repaired. A result
    whose tool run failed is an error result (see :func:`_with_error`).
    """
    builder = EventBuilder(trace_id)
    base = _last_intact(calls)
    if base >= 0:
        call = calls[base]
        for index, message in enumerate(call.inputs or []):
            flags = call.input_flags.get(index, ())
            add_message(builder, message, f"input[{index}]", call.start, flags)
    for position, call in enumerate(calls[max(base, 0) :]):
        if position:  # tools ran between the previous model call and this one
            _fill_results(builder, tools)
        issues = (*call.output_issues, *((TRUNCATED_CONTENT,) if call.inputs is None else ()))
        for index, message in enumerate(call.outputs or []):
            flags = (*issues, *call.output_flags.get(index, ()))
            add_message(builder, message, f"output[{index}]", call.end, flags)
            issues = ()
        if call.outputs is None:  # cut, or never returned (the call's own issue says which)
            missing = call.output_issues or (TRUNCATED_CONTENT,)
            builder.message(EventType.ASSISTANT, None, missing, call.end)
    _fill_results(builder, tools)
    failed = {run.call_id for run in tools if run.error and run.call_id}
    return [_with_error(event, failed) for event in builder.events]


def _with_error(event: Event, failed: set[str]) -> Event:
    """A result from the chat history whose tool span/run failed is an error result.

    Chat histories carry no error flag (OpenInference's tool messages, LangChain's serialized
    ``ToolMessage`` inputs); the tool's own span or run says it failed.
    """
    if event.type is EventType.TOOL_RESULT and event.status is None and event.call_id in failed:
        return event.model_copy(update={"status": "error"})
    return event


def _last_intact(calls: Sequence[ChatCall]) -> int:
    for index in reversed(range(len(calls))):
        if calls[index].inputs is not None:
            return index
    return -1


def _fill_results(builder: EventBuilder, tools: Sequence[ToolRun]) -> None:
    """Results recorded only by tool spans (e.g. the model call after them never happened)."""
    for run in tools:
        if run.call_id and builder.known_call(run.call_id) and not builder.answered(run.call_id):
            builder.result(
                run.call_id,
                run.result,
                run.issues,
                status="error" if run.error else None,
                timestamp=run.end,
            )


def _key(event: Event) -> str:
    return canonical_json([event.type.value, event.tool_name, event.arguments, event.call_id])


def _matches(early: Event, late: Event) -> bool:
    """Same event, allowing a missing assistant text on either side.

    The semconv 1.30 events drop an assistant's text preamble when it made tool calls (the
    ``gen_ai.assistant.message`` body keeps only ``tool_calls``) while the ``gen_ai.choice`` that
    produced it has the text, so a raw SDK's per-call traces disagree on exactly that.
    """
    if _key(early) != _key(late):
        return False
    loose = early.type is EventType.ASSISTANT and (early.text is None or late.text is None)
    return loose or early.text == late.text


def _is_prefix(short: tuple[Event, ...], long: tuple[Event, ...]) -> bool:
    return len(long) > len(short) and all(_matches(a, b) for a, b in zip(short, long, strict=False))


def merge_prefixes(traces: list[ParsedTrace]) -> list[ParsedTrace]:
    """Drop traces whose content is a strict prefix of another trace of the same conversation."""
    kept: list[ParsedTrace] = []
    for index, trace in enumerate(traces):
        superseded = trace.events and any(
            j != index
            and _same_conversation(trace, other)
            and _is_prefix(trace.events, other.events)
            for j, other in enumerate(traces)
        )
        if not superseded:
            kept.append(trace)
    return kept


def _same_conversation(a: ParsedTrace, b: ParsedTrace) -> bool:
    left, right = a.extras.session_id, b.extras.session_id
    return left == right or (left is None and right is None)


def with_session(trace: ParsedTrace, session_id: str | None) -> ParsedTrace:
    """``trace`` carrying ``session_id`` (kept when the trace already has one)."""
    if session_id is None or trace.extras.session_id is not None:
        return trace
    return replace(trace, extras=replace(trace.extras, session_id=session_id))
