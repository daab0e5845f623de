"""Helpers of the hostile-input suite: the CLI as a user runs it, inputs, and the case table.

Every case runs ``python -m worker.cli`` as a subprocess (real Redis, real SQLite store) and
records one row (case, outcome) that the suite prints as a table at the end of the session.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.queue.queue_kit import REPO, worker_env

__all__ = [
    "ROWS",
    "Done",
    "Row",
    "chat_line",
    "chat_record",
    "deep_chat_line",
    "evalq",
    "format_table",
    "record",
    "write",
]

MEASURED = [sys.executable, "-m", "tests.hostile.measured_cli"]


@dataclass(frozen=True)
class Row:
    """One hostile-input case and what the system did with it."""

    case: str
    outcome: str


ROWS: list[Row] = []
"""Every case's outcome, printed as one table at the end of the session."""


def record(case: str, outcome: str) -> None:
    """Add a row to the hostile-input table (call after the case's assertions passed)."""
    ROWS.append(Row(case, outcome))


def format_table(rows: Iterable[Row]) -> list[str]:
    """A fixed-width text table: case | outcome."""
    body = [(r.case, r.outcome) for r in rows]
    width = max([len("case"), *(len(c) for c, _ in body)])
    lines = [f"{'case'.ljust(width)} | outcome", f"{'-' * width}-+-{'-' * 40}"]
    lines += [f"{case.ljust(width)} | {outcome}" for case, outcome in body]
    return lines


@dataclass(frozen=True)
class Done:
    """A finished CLI run: exit status, output, and the peak resident memory of the process."""

    returncode: int
    stdout: str
    stderr: str
    peak_rss_mib: float


def evalq(
    env: dict[str, str], *args: str, stdin: bytes | None = None, timeout_s: float = 60.0
) -> Done:
    """Run ``evalq ARGS`` with ``EVALQ_<KEY>`` settings; report its own peak RSS (VmHWM)."""
    with tempfile.TemporaryDirectory() as scratch:
        peak = Path(scratch) / "vmhwm"
        proc = subprocess.Popen(
            [*MEASURED, str(peak), *args],
            env=worker_env(**env),
            cwd=REPO,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = proc.communicate(stdin, timeout=timeout_s)
        peak_kib = int(peak.read_text()) if peak.exists() else 0
    return Done(
        proc.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        peak_kib / 1024,
    )


def chat_record(i: int, *, text: str | None = None) -> dict[str, Any]:
    """A small valid chat trace (user question, assistant answer)."""
    return {
        "id": f"t{i}",
        "messages": [
            {"role": "user", "content": text or f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ],
    }


def chat_line(i: int) -> str:
    """:func:`chat_record` as one JSONL line."""
    return json.dumps(chat_record(i)) + "\n"


def deep_chat_line(i: int, depth: int = 300) -> str:
    """A chat trace whose assistant makes a tool call with arguments nested ``depth`` lists."""
    arguments = "[" * depth + "]" * depth
    return (
        json.dumps(
            {
                "id": f"deep{i}",
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": arguments},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                    {"role": "assistant", "content": "done"},
                ],
            }
        )
        + "\n"
    )


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8) and return the path."""
    path.write_text(text, encoding="utf-8")
    return path
