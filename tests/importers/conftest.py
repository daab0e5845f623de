"""Shared fixtures for the importer tests: the generated trace files and event comparison."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from producer.snapshot import Event
from worker.canonical_json import thaw

TRACES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"

Signature = tuple[str, str | None, str | None, str, str | None, str | None, tuple[str, ...]]


def signature(event: Event) -> Signature:
    """An event without its id, parent id and timestamp: what two exporters must agree on."""
    arguments = json.dumps(thaw(event.arguments), sort_keys=True, ensure_ascii=False)
    return (
        event.type.value,
        event.text,
        event.tool_name,
        arguments,
        event.call_id,
        event.status,
        event.issues,
    )


@pytest.fixture
def traces() -> Path:
    """The directory of generated fixtures (written by tests/fixtures/generate.py)."""
    return TRACES


@pytest.fixture
def signatures() -> Callable[[Sequence[Event]], list[Signature]]:
    """Events → their exporter-independent signatures."""
    return lambda events: [signature(e) for e in events]


@pytest.fixture
def fixture_lines() -> Callable[[str], list[dict[str, Any]]]:
    """The JSON records of one fixture file."""

    def read(name: str) -> list[dict[str, Any]]:
        with (TRACES / name).open(encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    return read


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[[list[Any]], Path]:
    """Write records (dicts, or raw strings taken as lines) to a fresh JSONL file."""
    counter = iter(range(1_000_000))

    def write(records: list[Any]) -> Path:
        path = tmp_path / f"input-{next(counter)}.jsonl"
        lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


# Every committed fixture comes out of the real libraries (tests/fixtures/generate.py), none is
# written by hand: the generator and the package versions (pinned in pyproject's ``fixtures``).
GENERATED: dict[str, str] = {
    "openai_chat.jsonl": "openai 3.57.0 (logged histories)",
    "chat_exchange.jsonl": "openai 3.57.0 (logged request/response pairs)",
    "openai_stream.jsonl": "openai 3.57.0 (streamed chunks, ChatCompletionChunk.to_dict())",
    "openai_responses.jsonl": "openai 3.57.0 (Responses API)",
    "anthropic.jsonl": "anthropic 2.15.0",
    "otel_genai.jsonl": "opentelemetry-instrumentation-openai-v2 2.4b0, util-genai 1.1b0",
    "otel_legacy.jsonl": "opentelemetry-instrumentation-openai-v2 2.3b0 (semconv 1.30 events)",
    "openinference.jsonl": "openinference-instrumentation-openai 0.1.66",
    "openinference_truncated.jsonl": "openinference-instrumentation-openai 0.1.66, limit 600",
    "openinference_anthropic.jsonl": "openinference-instrumentation-anthropic 3.1.0",
    "langsmith.jsonl": "langsmith 0.15.1, langchain-core 1.8.3, langchain-openai 1.7.4",
    "langfuse.jsonl": "langfuse 5.2.0 (ingestion captured, export derived)",
}
