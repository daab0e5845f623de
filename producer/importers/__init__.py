"""Trace importers: real exporters' output → normalized events + catalog (:class:`ParsedTrace`).

Two kinds of format:

- *record* formats hold one whole trace per JSON value (a JSONL line or an array item):
  ``openai_chat``, ``openai_responses``, ``anthropic``, ``chat_exchange``, ``chat_stream``
  (a request with its streamed ``chat.completion.chunk`` list), ``fields``;
- *group* formats spread a trace over many spans or runs, possibly across lines (OTLP export
  batches, LangSmith run posts/patches, Langfuse observation pages): ``otlp`` (auto:
  OpenInference when a trace carries ``openinference.span.kind``, else OTel GenAI),
  ``otel_genai``, ``openinference``, ``langsmith``, ``langfuse`` (a trace export with its
  observations, or ``/api/public/v2/observations`` pages).
  Their items are grouped by trace id (or conversation id for sessions) before parsing.

:func:`detect` picks the format of one JSON value (auto-detection is per line); :data:`FORMATS`
is the registry the reader uses (``format=`` forces one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import (
    anthropic,
    chat_exchange,
    chat_stream,
    fields,
    langfuse,
    langsmith,
    openai_chat,
    openai_responses,
    otlp,
)
from ._common import (
    AMBIGUOUS_CALL_ID,
    TRUNCATED_CONTENT,
    UNPAIRED_TOOL_RESULT,
    UNSUPPORTED_MESSAGE_CONTENT,
    UNSUPPORTED_TOOL_CONTENT,
    Extras,
    FieldError,
    Item,
    ParsedTrace,
)

__all__ = [
    "AMBIGUOUS_CALL_ID",
    "FORMATS",
    "TRUNCATED_CONTENT",
    "UNPAIRED_TOOL_RESULT",
    "UNSUPPORTED_MESSAGE_CONTENT",
    "UNSUPPORTED_TOOL_CONTENT",
    "Extras",
    "FieldError",
    "GroupFormat",
    "Item",
    "ParsedTrace",
    "RecordFormat",
    "detect",
]


@dataclass(frozen=True)
class RecordFormat:
    """A format with one whole trace per JSON value."""

    name: str
    detect: Callable[[Mapping[str, Any]], bool]
    parse: Callable[[dict[str, Any], str], list[ParsedTrace]]


@dataclass(frozen=True)
class GroupFormat:
    """A format whose traces are assembled from items spread over lines.

    ``split(record, session)`` yields the items of one JSON value; ``parse(key, payloads)``
    turns one group into traces; ``merge(traces)`` runs once over all traces of the file at its
    end (dropping histories repeated by later traces of the same conversation).
    """

    name: str
    detect: Callable[[Mapping[str, Any]], bool]
    split: Callable[[dict[str, Any], bool], Iterable[Item]]
    parse: Callable[[str, list[Any]], list[ParsedTrace]]
    merge: Callable[[list[ParsedTrace]], list[ParsedTrace]] = list


Format = RecordFormat | GroupFormat

# Detection order matters: more specific shapes first (an Anthropic record also has "messages").
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        RecordFormat(fields.NAME, fields.detect, fields.parse),
        GroupFormat(otlp.NAME, otlp.detect, otlp.split, otlp.parse_auto, otlp.merge),
        GroupFormat(otlp.GENAI, otlp.detect, otlp.split, otlp.parse_genai, otlp.merge),
        GroupFormat(
            otlp.OPENINFERENCE, otlp.detect, otlp.split, otlp.parse_openinference, otlp.merge
        ),
        GroupFormat(
            langsmith.NAME, langsmith.detect, langsmith.split, langsmith.parse, langsmith.merge
        ),
        GroupFormat(langfuse.NAME, langfuse.detect, langfuse.split, langfuse.parse, langfuse.merge),
        RecordFormat(openai_responses.NAME, openai_responses.detect, openai_responses.parse),
        RecordFormat(anthropic.NAME, anthropic.detect, anthropic.parse),
        RecordFormat(chat_stream.NAME, chat_stream.detect, chat_stream.parse),
        RecordFormat(chat_exchange.NAME, chat_exchange.detect, chat_exchange.parse),
        RecordFormat(openai_chat.NAME, openai_chat.detect, openai_chat.parse),
    )
}

_AUTO_ORDER = [name for name in FORMATS if name not in (otlp.GENAI, otlp.OPENINFERENCE)]


def detect(record: Mapping[str, Any]) -> str | None:
    """The name of the first format whose shape matches ``record`` (``None`` if none does)."""
    for name in _AUTO_ORDER:
        if FORMATS[name].detect(record):
            return name
    return None
