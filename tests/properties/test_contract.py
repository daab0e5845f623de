"""The wire contract under arbitrary input: snapshots and outcome events validate or raise
``ValueError`` — nothing else — and the worker's decoder turns every refusal into a known
dead-letter reason code."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer import OutcomeEvent, Snapshot, read_snapshots
from producer._backfill import send_outcomes
from tests.properties.strategies import examples, json_values, mutate_json, mutate_lines
from tests.queue.queue_kit import REPO, example_snapshots
from worker.dead_letters import DeadLetterCode
from worker.handling import decode_outcome, decode_snapshot

CODES = {code.value for code in DeadLetterCode}
FAST = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@cache
def _valid_wires() -> tuple[dict[str, Any], ...]:
    """Real snapshots: the shipped examples and every importer fixture's snapshots."""
    snapshots = list(example_snapshots().values())
    for fixture in sorted((REPO / "tests" / "fixtures" / "traces").glob("*.jsonl")):
        snapshots += read_snapshots(fixture)
    return tuple(s.wire() for s in snapshots)


def _outcome_wire() -> dict[str, Any]:
    event = OutcomeEvent(
        event_id="evt-1",
        trace_id="order-42",
        name="refund_reversed",
        value={"amount": 12.5, "currency": "EUR"},
        observed_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    return event.wire()


def _validate_snapshot(value: Any) -> Snapshot | None:
    """The property: a Snapshot or a ValueError; a Snapshot hashes and projects or says why."""
    try:
        snapshot = Snapshot.model_validate(value)
    except ValueError:
        return None
    try:
        assert len(snapshot.snapshot_id) == 64
        snapshot.trace()
    except ValueError:  # lone surrogates cannot be hashed; window violations are ValueErrors
        pass
    return snapshot


def _refusal(decode: Callable[[Any], object], item: Any) -> str | None:
    """None if ``decode`` accepts ``item``, else the code of what it raised (or its type)."""
    try:
        decode(item)
    except Exception as exc:
        return str(getattr(exc, "code", f"unexpected {type(exc).__name__}"))
    return None


@FAST
@given(json_values)
def test_arbitrary_json_is_a_snapshot_or_a_value_error(value: Any) -> None:
    """Snapshot.model_validate on any JSON value: a Snapshot or ValueError, never another."""
    _validate_snapshot(value)


@FAST
@given(st.data())
def test_damaged_real_snapshots_are_snapshots_or_value_errors(data: st.DataObject) -> None:
    """Real snapshot wires edited deep inside: a Snapshot or ValueError, never another error."""
    wire = data.draw(st.sampled_from(_valid_wires()))
    _validate_snapshot(data.draw(mutate_json(wire)))


@FAST
@given(st.data())
def test_the_worker_decoder_refuses_with_a_known_code(data: st.DataObject) -> None:
    """What a task body receives: a Snapshot, or a refusal carrying a dead-letter reason code."""
    wire = data.draw(st.sampled_from(_valid_wires()))
    item = data.draw(st.one_of(mutate_json(wire), json_values))
    code = _refusal(decode_snapshot, item)
    assert code is None or code in CODES, code


@FAST
@given(st.data())
def test_outcome_events_validate_or_are_refused_with_a_code(data: st.DataObject) -> None:
    """OutcomeEvent: model_validate gives an event or ValueError; the decoder gives a code."""
    item = data.draw(st.one_of(mutate_json(_outcome_wire()), json_values))
    with contextlib.suppress(ValueError):
        OutcomeEvent.model_validate(item)
    code = _refusal(decode_outcome, item)
    assert code is None or code in CODES, code


def _outcome_file_lines() -> list[str]:
    wire = _outcome_wire()
    return [json.dumps({**wire, "event_id": f"evt-{i}"}) for i in range(4)]


@settings(max_examples=examples(150), deadline=None)
@given(st.data())
def test_damaged_outcome_files_are_sent_or_rejected_line_by_line(data: st.DataObject) -> None:
    """``evalq outcome --file`` input, damaged: valid lines sent, the others located rejections."""
    # UTF-8 damage has a test of its own below.
    damaged = data.draw(mutate_lines(_outcome_file_lines(), bytes_too=False))
    sent: list[OutcomeEvent] = []
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "outcomes.jsonl"
        path.write_bytes(damaged)
        summary = send_outcomes(path, sent.append)
    assert summary.sent == len(sent)
    lines = damaged.count(b"\n") + 1
    for rejected in summary.rejected_examples:
        assert 1 <= rejected.line <= lines
        assert rejected.field.strip()
        assert rejected.code.strip()


def test_invalid_utf8_in_an_outcome_file_is_a_rejection_not_a_crash(tmp_path: Path) -> None:
    """One line that is not UTF-8 among good ones: the good lines are still sent."""
    good = _outcome_file_lines()
    path = tmp_path / "outcomes.jsonl"
    path.write_bytes(f"{good[0]}\n".encode() + b"\xff\xfe broken\n" + f"{good[1]}\n".encode())
    sent: list[OutcomeEvent] = []
    summary = send_outcomes(path, sent.append)
    assert (summary.sent, summary.rejected) == (2, 1)
    assert summary.rejected_examples[0].line == 2
