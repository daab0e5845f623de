"""The reader's hostile-input limits, in process: document recovery, streams, long lines."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

import producer._reader as reader
from producer import ImportErrorReport, read_snapshots
from tests.hostile.hostile_kit import chat_record


def _read(path: Path) -> tuple[list[str], list[str]]:
    report = ImportErrorReport()
    ids = [s.trace_id for s in read_snapshots(path, report=report)]
    return ids, [f"{r.line}:{r.field}:{r.code}" for r in report.rejected]


def test_a_bad_member_with_brackets_and_quotes_in_strings_is_skipped_exactly(
    tmp_path: Path,
) -> None:
    """A bad record whose strings hold ``],{"\\`` is one rejection; the next records are kept."""
    good = [json.dumps(chat_record(i), indent=2) for i in range(3)]
    bad = '{"id": "b", "note": "tricky ],{\\" [", "n": NaN, "nested": [{"x": "]"}]}'
    path = tmp_path / "doc.json"
    path.write_text("[\n" + ",\n".join([good[0], bad, good[1], good[2]]) + "\n]\n")
    assert _read(path) == (["t0", "t1", "t2"], ["1:[1]:INVALID_JSON"])


def test_an_invalid_document_on_a_stream_is_one_rejection(tmp_path: Path) -> None:
    """A stream's invalid document keeps the records before the error; the rest is one rejection."""
    # A stream cannot be re-read; the rejection names the index where the document broke.
    fifo = tmp_path / "doc.fifo"
    os.mkfifo(fifo)
    text = json.dumps([chat_record(0), chat_record(1)], indent=2).replace('"question 1"', "NaN")

    def feed() -> None:
        with fifo.open("w", encoding="utf-8") as out:
            out.write(text)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    result = _read(fifo)
    writer.join(5)
    assert result == (["t0"], ["1:[1]:INVALID_JSON"])


def test_a_line_over_the_limit_is_skipped_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line longer than MAX_LINE_BYTES is LINE_TOO_LARGE by number; the next line is read."""
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(reader, "_SKIP_CHUNK_BYTES", 64)
    long_line = json.dumps(chat_record(1, text="x" * 5000))
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps(chat_record(0)) + "\n" + long_line + "\n" + json.dumps(chat_record(2))
    )
    assert _read(path) == (["t0", "t2"], ["2:$:LINE_TOO_LARGE"])
