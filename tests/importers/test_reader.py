"""The reader: invalid input names file, line and field; the rest of the file is processed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from producer import ImportErrorReport, InvalidTraceError, read_snapshots
from producer._reader import read_located

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]

GOOD = {
    "id": "good",
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
}


def _good(n: int) -> dict[str, Any]:
    return {**GOOD, "id": f"good-{n}"}


def test_bad_lines_are_reported_and_the_rest_is_read(write_jsonl: Writer) -> None:
    """Each bad line gives one rejection (file, line, field, code); good lines still import."""
    path = write_jsonl(
        [
            _good(1),
            "{not json",
            {"id": "x", "messages": [{"role": "wizard", "content": "?"}]},
            _good(2),
            "[1, 2]",
            {"unrelated": True},
            {"id": "y", "messages": [{"role": "user", "content": 5}]},
            _good(3),
        ]
    )
    report = ImportErrorReport()
    ids = [s.trace_id for s in read_snapshots(path, report=report)]
    assert ids == ["good-1", "good-2", "good-3"]
    got = [(r.line, r.field, r.code) for r in report.rejected]
    assert got == [
        (2, "$", "INVALID_JSON"),
        (3, "messages[0].role", "INVALID_FIELD"),
        (5, "[0]", "NOT_AN_OBJECT"),
        (5, "[1]", "NOT_AN_OBJECT"),
        (6, "$", "UNKNOWN_FORMAT"),
        (7, "messages[0].content", "INVALID_FIELD"),
    ]
    assert all(r.path == str(path) for r in report.rejected)
    assert report.rejected_count == 6
    assert report.rejected_lines == 5
    assert report.lines_read == 8
    assert report.snapshots == 3


def test_without_a_report_the_first_bad_line_raises(write_jsonl: Writer) -> None:
    """The raising mode names file, line and field in the exception."""
    path = write_jsonl([_good(1), {"id": "x", "messages": [{"role": "user"}, 3]}])
    snapshots = read_snapshots(path)
    assert next(snapshots).trace_id == "good-1"
    with pytest.raises(InvalidTraceError) as info:
        next(snapshots)
    rejected = info.value.rejected
    assert (rejected.line, rejected.field, rejected.code) == (2, "messages[1]", "INVALID_FIELD")
    assert str(path) in str(info.value)
    assert ":2:" in str(info.value)


def test_non_json_numbers_and_bad_bytes_are_rejected(tmp_path: Path) -> None:
    """NaN (not JSON) and invalid UTF-8 are rejected per line, never crash the read."""
    path = tmp_path / "bad.jsonl"
    good = json.dumps(GOOD).encode()
    path.write_bytes(b'{"id": "n", "messages": [], "x": NaN}\n\xff\xfe\n' + good + b"\n")
    report = ImportErrorReport()
    assert [s.trace_id for s in read_snapshots(path, report=report)] == ["good"]
    assert [(r.line, r.code) for r in report.rejected] == [
        (1, "INVALID_JSON"),
        (2, "INVALID_ENCODING"),
    ]


def test_unpaired_surrogates_are_rejected(write_jsonl: Writer) -> None:
    """Text that cannot be content-hashed (a lone surrogate) is a rejection, not a crash."""
    line = (
        '{"id": "s", "messages": [{"role": "user", "content": "\\ud800"},'
        ' {"role": "assistant", "content": "x"}]}'
    )
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([line]), report=report)) == []
    assert [r.code for r in report.rejected] == ["INVALID_UNICODE"]


def test_invalid_label_names_its_field(write_jsonl: Writer) -> None:
    """A gold label with both passed and label is rejected at labels.<metric>."""
    record = {**GOOD, "labels": {"grounded": {"passed": True, "label": "yes"}}}
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl([record]), report=report)) == []
    assert [(r.field, r.code) for r in report.rejected] == [("labels.grounded", "INVALID_LABEL")]


def test_whole_json_document_and_arrays(tmp_path: Path, fixture_lines: Lines) -> None:
    """A pretty-printed JSON array of records is read as one document, items in order."""
    records = fixture_lines("openai_chat.jsonl")
    path = tmp_path / "export.json"
    path.write_text(json.dumps(records, indent=2, ensure_ascii=False), encoding="utf-8")
    located = list(read_located(path))
    assert [x.snapshot.trace_id for x in located][:2] == ["chat-weather", "chat-refund"]
    assert {x.line for x in located} == {1}


def test_forced_format_applies_to_every_line(traces: Path) -> None:
    """``format=`` overrides detection: chat lines forced to anthropic fail on the system role."""
    report = ImportErrorReport()
    path = traces / "openai_chat.jsonl"
    parsed = list(read_snapshots(path, format="anthropic", report=report))
    assert [(s.trace_id, s.source) for s in parsed] == [("chat-no_tools", "anthropic")]
    assert report.rejected_count == 4
    assert {r.field for r in report.rejected} == {"messages[0].role"}
    with pytest.raises(ValueError, match="unknown format"):
        list(read_snapshots(path, format="csv"))


def test_reading_streams_line_by_line(write_jsonl: Writer) -> None:
    """The reader yields a line's snapshot before reading the next line (constant memory)."""
    path = write_jsonl([_good(1)])
    snapshots = read_snapshots(path)
    assert next(snapshots).trace_id == "good-1"
    with path.open("a", encoding="utf-8") as handle:  # appended after the first yield
        handle.write(json.dumps(_good(2)) + "\n")
    assert [s.trace_id for s in snapshots] == ["good-2"]


def test_located_snapshots_name_their_line(traces: Path) -> None:
    """``read_located`` tells the line each snapshot's trace started on."""
    located = list(read_located(traces / "openai_chat.jsonl"))
    assert [(x.line, x.snapshot.trace_id) for x in located] == [
        (1, "chat-weather"),
        (2, "chat-refund"),
        (2, "chat-refund"),
        (3, "chat-pending"),
        (4, "chat-no_tools"),
        (5, "chat-unicode"),
    ]
