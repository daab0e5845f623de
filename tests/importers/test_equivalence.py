"""One conversation, many exporters: the same events up to ids, or a recorded reason why not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from producer import read_snapshots
from producer.snapshot import EventType, Snapshot

Sigs = Callable[[Any], list[Any]]


def _first(path: Path, user_text: str) -> Snapshot:
    return next(s for s in read_snapshots(path) if any(e.text == user_text for e in s.events))


@pytest.mark.parametrize(
    "name",
    [
        "chat_exchange.jsonl",
        "otel_genai.jsonl",
        "openinference.jsonl",
        "openai_responses.jsonl",
        "langsmith.jsonl",
        "langfuse.jsonl",
    ],
)
def test_weather_run_matches_openai_chat_log(traces: Path, name: str, signatures: Sigs) -> None:
    """The parallel-weather run gives the chat log's events (results in arrival order)."""
    reference = _first(traces / "openai_chat.jsonl", "Weather in Paris and Rome?")
    other = _first(traces / name, "Weather in Paris and Rome?")
    got, want = signatures(other.events), signatures(reference.events)
    if name == "openai_responses.jsonl":
        # Recorded reason: this app appended Responses outputs in call order (the Chat app
        # appended results as they finished), so only the order of the two results differs.
        assert sorted(got[5:7]) == sorted(want[5:7])
        got, want = got[:5] + got[7:], want[:5] + want[7:]
    assert got == want


def test_anthropic_weather_run_matches_up_to_result_order(traces: Path, signatures: Sigs) -> None:
    """Anthropic's tool_use/tool_result blocks give the same calls, results and answer."""
    reference = _first(traces / "openai_chat.jsonl", "Weather in Paris and Rome?")
    other = _first(traces / "anthropic.jsonl", "Weather in Paris and Rome?")
    assert sorted(signatures(other.events)) == sorted(signatures(reference.events))


def test_legacy_events_differ_only_in_the_dropped_preamble(traces: Path, signatures: Sigs) -> None:
    """Recorded reason: semconv 1.30 assistant events drop the text that came with calls."""
    reference = _first(traces / "openai_chat.jsonl", "Weather in Paris and Rome?")
    legacy = _first(traces / "otel_legacy.jsonl", "Weather in Paris and Rome?")
    want = signatures(reference.events)
    got = signatures(legacy.events)
    preamble = next(i for i, e in enumerate(reference.events) if e.type is EventType.ASSISTANT)
    assert got[preamble][1] is None
    assert want[preamble][1] == "I'll check both cities."
    assert got[:preamble] + got[preamble + 1 :] == want[:preamble] + want[preamble + 1 :]


@pytest.mark.parametrize("name", ["otel_genai.jsonl", "openinference.jsonl", "otel_legacy.jsonl"])
def test_session_turns_match_across_exporters(traces: Path, name: str, signatures: Sigs) -> None:
    """Both refund turns import identically from the chat log and from span exporters."""
    reference = [
        s for s in read_snapshots(traces / "openai_chat.jsonl") if s.trace_id == "chat-refund"
    ]
    others = [
        s
        for s in read_snapshots(traces / name)
        if any(e.text and "refund" in e.text.lower() for e in s.events if e.type is EventType.USER)
    ]
    assert [signatures(s.events) for s in others] == [signatures(s.events) for s in reference]
