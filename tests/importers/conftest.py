"""Shared fixtures for the importer tests: the generated trace files and event comparison."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from producer.snapshot import Event
from worker._json import thaw

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
