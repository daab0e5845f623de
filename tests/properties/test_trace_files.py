"""Trace files in every supported format, damaged: the reader never crashes or hangs, and every
rejection names its file, line and field with a reason code."""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer import ImportErrorReport, Snapshot, read_snapshots
from producer._reader import IMPORTER_ERROR
from producer.importers import FORMATS
from tests.properties.strategies import examples, mutate_lines
from tests.queue.queue_kit import REPO

FIXTURES = sorted((REPO / "tests" / "fixtures" / "traces").glob("*.jsonl"))
CODE = re.compile(r"^[A-Z][A-Z0-9_]*$")
READ_BOUND_S = 10.0
"""A damaged fixture (a few KB) reads in milliseconds; ten seconds means a hang."""


def _read(data: bytes, fmt: str, unit: str) -> tuple[list[Snapshot], ImportErrorReport, int, str]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "damaged.jsonl"
        path.write_bytes(data)
        report = ImportErrorReport()
        started = time.monotonic()
        snapshots = list(read_snapshots(path, fmt, unit, report=report))
        assert time.monotonic() - started < READ_BOUND_S, "reading a small file must not hang"
        return snapshots, report, data.count(b"\n") + 1, str(path)


def _check(snapshots: list[Snapshot], report: ImportErrorReport, lines: int, path: str) -> None:
    for rejected in report.rejected:
        assert rejected.path == path
        assert 1 <= rejected.line <= lines
        assert rejected.field.strip(), rejected
        assert CODE.match(rejected.code), rejected
        assert rejected.message.strip(), rejected
        assert rejected.code != IMPORTER_ERROR, f"an importer crashed: {rejected}"
    assert report.rejected_count >= len(report.rejected)
    for snapshot in snapshots:
        assert re.fullmatch(r"[0-9a-f]{64}", snapshot.snapshot_id)
        assert Snapshot.model_validate(snapshot.wire()).snapshot_id == snapshot.snapshot_id
        snapshot.check_window()  # a producer never emits a snapshot the worker would refuse


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    fixture=st.sampled_from(FIXTURES),
    fmt=st.sampled_from(["auto"] * len(FORMATS) + list(FORMATS)),  # half detected, half forced
    unit=st.sampled_from(["invocation", "session", "tool_call"]),
    data=st.data(),
)
def test_damaged_trace_files_never_crash_and_every_rejection_is_located(
    fixture: Path, fmt: str, unit: str, data: st.DataObject
) -> None:
    """Mutated real fixtures, any format forced or detected: snapshots or located rejections."""
    lines = fixture.read_text(encoding="utf-8").splitlines()
    damaged = data.draw(mutate_lines([line for line in lines if line.strip()]))
    snapshots, report, count, path = _read(damaged, fmt, unit)
    _check(snapshots, report, count, path)


@settings(max_examples=examples(40), deadline=None)
@given(fixture=st.sampled_from(FIXTURES), cut=st.floats(0.0, 1.0))
def test_a_file_cut_short_anywhere_is_read_up_to_the_cut(fixture: Path, cut: float) -> None:
    """A file truncated mid-write (a crashed exporter): no crash, the damage is located."""
    data = fixture.read_bytes()
    snapshots, report, count, path = _read(data[: int(len(data) * cut)], "auto", "invocation")
    _check(snapshots, report, count, path)
