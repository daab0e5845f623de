"""Helpers of the hostile-input suite: the CLI as a user runs it, inputs, and the case table.

Every case runs ``python -m producer.cli`` as a subprocess (real Redis, real SQLite store) and
records one row (case, outcome) that the suite prints as a table at the end of the session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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

EVALQ = [sys.executable, "-m", "producer.cli"]


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


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    finally:
        pipe.close()


def evalq(
    env: dict[str, str], *args: str, stdin: bytes | None = None, timeout_s: float = 60.0
) -> Done:
    """Run ``evalq ARGS`` with ``EVALQ_<KEY>`` settings; measure its peak RSS (``wait4``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
            [*EVALQ, *args],
            env=worker_env(**env),
            cwd=REPO,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        feeder = None
        if stdin is not None:
            assert proc.stdin is not None
            feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
            feeder.start()
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if feeder is not None:
            feeder.join(5)
        out.seek(0)
        err.seek(0)
        return Done(
            proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            usage.ru_maxrss / 1024,  # KiB on Linux
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
