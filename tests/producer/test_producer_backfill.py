"""Backfill against a real Redis and a real SQLite store: counts, resume, pressure, memory."""

from __future__ import annotations

import io
import os
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from rich.console import Console

from producer import Producer
from producer import _backfill as backfill_module
from producer import _reader as reader_module
from producer._backfill import (
    BackfillProgress,
    BackfillSummary,
    RedisQueueDepth,
    backfill_rule,
    expand_paths,
    rich_progress,
    run_backfill,
    send_outcomes,
    store_counts,
)
from producer._sampling import Sampler, SamplingRule, replace_fields
from producer.snapshot import LANE_QUEUES, Lane, OutcomeEvent, Snapshot
from tests.producer.producer_kit import queue_length, queued_payloads, write_lines
from worker.store import Store, open_store

pytestmark = pytest.mark.services

BACKFILL_QUEUE = LANE_QUEUES[Lane.BACKFILL]
PER_MESSAGE = 25


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A real SQLite store for the checkpoints."""
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


@pytest.fixture
def producer(redis_url: str) -> Iterator[Producer]:
    """The queue helper's Producer on the test Redis."""
    with Producer(redis_url) as opened:
        yield opened


def _sender(producer: Producer) -> Any:
    def send(batch: Sequence[Snapshot]) -> None:
        producer.enqueue_many(batch, lane=Lane.BACKFILL, batch_size=PER_MESSAGE)

    return send


def _queued_snapshots(url: str) -> list[dict[str, Any]]:
    """Every snapshot wire dict in the backfill queue (messages carry lists of them)."""
    return [wire for args in queued_payloads(url, BACKFILL_QUEUE) for wire in args[0]]


def test_backfill_enqueues_exactly_the_valid_snapshots_and_reports_bad_lines(
    tmp_path: Path, redis_url: str, store: Store, producer: Producer
) -> None:
    """3000 lines, 30 broken: 2970 snapshots queued once each; rejections name file/line/field."""
    source = tmp_path / "traces.jsonl"
    bad = write_lines(source, 3_000, bad_every=100)
    summary = run_backfill([source], _sender(producer), store, batch_size=200)
    done = summary.progress
    assert (done.read, done.enqueued, done.rejected) == (3_000 - bad, 3_000 - bad, bad)
    assert bad == 30
    queued = _queued_snapshots(redis_url)
    assert len(queued) == 2_970
    assert len({w["trace_id"] for w in queued}) == 2_970
    # 14 batches of 200 (8 messages of 25 each) and one of 170 (7 messages)
    assert queue_length(redis_url, BACKFILL_QUEUE) == 14 * 8 + 7
    rule = backfill_rule(summary.backfill_id)
    assert {(w["sampling"]["lane"], w["sampling"]["rule"]) for w in queued} == {("backfill", rule)}
    first = summary.rejected_examples[0]
    assert (first.path, first.line, first.field) == (str(source), 100, "messages[0].role")
    assert not summary.stopped


def test_resume_after_an_interruption_enqueues_only_the_remainder(
    tmp_path: Path, redis_url: str, store: Store, producer: Producer
) -> None:
    """Stopped after 3 batches, then resumed: every snapshot queued exactly once in total."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 2_000)
    first = run_backfill(
        [source], _sender(producer), store, batch_size=150, should_stop=lambda p: p.batches >= 3
    )
    assert first.stopped
    assert first.progress.enqueued == 450
    assert len(_queued_snapshots(redis_url)) == 450
    second = run_backfill(
        [source], _sender(producer), store, batch_size=150, resume=first.backfill_id
    )
    assert not second.stopped
    assert (second.progress.skipped, second.progress.enqueued) == (450, 1_550)
    queued = _queued_snapshots(redis_url)
    assert len(queued) == 2_000
    assert len({w["trace_id"] for w in queued}) == 2_000
    third = run_backfill([source], _sender(producer), store, resume=first.backfill_id)
    assert (third.progress.read, third.progress.enqueued, third.progress.files_done) == (0, 0, 1)
    assert len(_queued_snapshots(redis_url)) == 2_000


def test_rerunning_the_same_backfill_gives_the_same_snapshot_ids(
    tmp_path: Path, redis_url: str, producer: Producer
) -> None:
    """Same paths and options → same backfill id and byte-identical snapshots (idempotent)."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 300)
    runs = [run_backfill([source], _sender(producer), None, batch_size=100) for _ in range(2)]
    assert runs[0].backfill_id == runs[1].backfill_id
    ids = [Snapshot.model_validate(w).snapshot_id for w in _queued_snapshots(redis_url)]
    assert len(ids) == 600
    assert len(set(ids)) == 300
    other = run_backfill([source], lambda b: None, None, unit="session")
    assert other.backfill_id != runs[0].backfill_id  # a content-changing option is a new id


def test_resume_with_other_options_is_refused(tmp_path: Path, store: Store) -> None:
    """A resume id that does not match the paths/options, or has no checkpoints, is refused."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 10)
    done = run_backfill([source], lambda b: None, store)
    with pytest.raises(ValueError, match="BACKFILL_MISMATCH"):
        run_backfill([source], lambda b: None, store, unit="session", resume=done.backfill_id)
    with pytest.raises(ValueError, match="UNKNOWN_BACKFILL"):  # a mistyped custom id
        run_backfill([source], lambda b: None, store, resume="nightly-2025-01-0l")


def test_directories_expand_sorted_and_skip_hidden_and_other_files(tmp_path: Path) -> None:
    """A directory becomes its .jsonl/.json/.ndjson files, sorted, hidden ones left out."""
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    for name in ("b/2.jsonl", "a.json", "b/1.ndjson", ".hidden/x.jsonl", "notes.txt"):
        (tmp_path / name).write_text("{}\n")
    found = [p.relative_to(tmp_path).as_posix() for p in expand_paths([tmp_path])]
    assert found == ["a.json", "b/1.ndjson", "b/2.jsonl"]
    with pytest.raises(FileNotFoundError):
        expand_paths([tmp_path / "missing.jsonl"])


def test_back_pressure_waits_until_the_queue_has_room(
    tmp_path: Path, redis_url: str, producer: Producer
) -> None:
    """With max depth 6 the pump never sends into a fuller queue; it waits for consumers."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 1_000)
    depth = RedisQueueDepth(redis_url, BACKFILL_QUEUE)
    client = redis.Redis.from_url(redis_url)
    consumed: list[int] = []
    depth_before_send: list[int] = []

    def consume(progress: BackfillProgress) -> None:
        if progress.waiting:  # play the worker: take what is queued
            taken = client.lpop(BACKFILL_QUEUE, 1_000) or []
            consumed.append(len(taken))

    def send(batch: Sequence[Snapshot]) -> None:
        depth_before_send.append(depth())
        producer.enqueue_many(batch, lane=Lane.BACKFILL, batch_size=PER_MESSAGE)

    summary = run_backfill(
        [source],
        send,
        None,
        batch_size=100,
        max_queue_depth=6,
        queue_depth=depth,
        poll_interval_s=0.01,
        progress=consume,
    )
    depth.close()
    remaining = queue_length(redis_url, BACKFILL_QUEUE)
    client.close()
    assert summary.progress.enqueued == 1_000
    assert max(depth_before_send) < 6
    assert sum(consumed) + remaining == 1_000 // PER_MESSAGE
    assert len([n for n in consumed if n]) >= 4  # it really had to wait, repeatedly


def test_redis_queue_depth_counts_priority_sub_lists(redis_url: str) -> None:
    """Depth sums the queue and kombu's priority lists (q, q\\x06\\x163, ...)."""
    client = redis.Redis.from_url(redis_url)
    client.rpush("evalq.backfill", "a", "b")
    client.rpush("evalq.backfill\x06\x163", "c")
    client.rpush("evalq.backfill\x06\x169", "d")
    client.rpush("evalq.live", "not counted")
    depth = RedisQueueDepth(redis_url, "evalq.backfill")
    assert depth() == 4
    depth.close()
    client.close()


def test_rate_limit_paces_the_pump(tmp_path: Path) -> None:
    """At 2000 snapshots/s, 1000 snapshots in batches of 100 take at least ~0.45 s."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 1_000)
    sent_at: list[float] = []
    start = time.monotonic()
    run_backfill(
        [source],
        lambda b: sent_at.append(time.monotonic()),
        None,
        batch_size=100,
        rate_limit_per_s=2_000,
    )
    assert len(sent_at) == 10
    assert sent_at[-1] - start >= 0.9 * 900 / 2_000  # the 10th batch may start at 0.45 s


def test_sampler_in_a_backfill_stamps_rule_and_counts(tmp_path: Path, store: Store) -> None:
    """A sampler thins a backfill deterministically; kept snapshots carry backfill:<id>/<rule>."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 2_000)
    sent: list[Snapshot] = []
    sampler = Sampler([SamplingRule(name="v0-all", rate=1.0, agent_version="v0")], default_rate=0.1)
    summary = run_backfill([source], sent.extend, store, sampler=sampler, batch_size=250)
    done = summary.progress
    assert done.enqueued + done.sampled_out == 2_000
    assert done.enqueued == len(sent)
    v0 = [s for s in sent if s.slice.agent_version == "v0"]
    assert len(v0) == 667  # i % 3 == 0 for i < 2000: all kept by the first rule
    others = len(sent) - len(v0)
    assert 0.05 * 1_333 < others < 0.15 * 1_333
    prefix = backfill_rule(summary.backfill_id) + "/"
    assert {s.sampling.rule for s in sent} == {prefix + "v0-all", prefix + "default"}
    assert {s.sampling.weight for s in sent} == {1.0, 10.0}
    assert {s.sampling.lane for s in sent} == {Lane.BACKFILL}


def test_progress_reports_counts_and_reads_evaluated_back(tmp_path: Path) -> None:
    """The progress callback sees growing counts; evaluated/failed come from the reader."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 500, bad_every=50)
    seen: list[BackfillProgress] = []
    asked: list[str] = []

    def evaluated(backfill_id: str) -> tuple[int, int]:
        asked.append(backfill_id)
        return 7 * len(asked), 1

    summary = run_backfill(
        [source],
        lambda b: None,
        None,
        batch_size=100,
        progress=seen.append,
        evaluated=evaluated,
        evaluated_interval_s=0.0,
    )
    assert [p.enqueued for p in seen][:3] == [100, 200, 300]
    assert seen[-1].enqueued == 490
    assert seen[-1].rejected == 10
    assert set(asked) == {summary.backfill_id}
    assert (seen[-1].evaluated, seen[-1].failed) == (7 * len(asked), 1)


def test_store_without_backfill_counts_gives_no_reader(store: Store) -> None:
    """store_counts() only offers a reader when the store can count one backfill's evaluations."""

    class Counting:
        def backfill_counts(self, backfill_id: str) -> tuple[int, int]:
            return (3, 1) if backfill_id == "bf-x" else (0, 0)

    real = store_counts(store)
    if hasattr(store, "backfill_counts"):  # once the store offers it, the reader must work
        assert real is not None
        assert real("bf-none") == (0, 0)
    else:
        assert real is None
    reader = store_counts(Counting())
    assert reader is not None
    assert reader("bf-x") == (3, 1)


# The figure is 10k vs 100k lines: EVALQ_TEST_MEMORY_LINES=10000,100000 (about 1 minute);
# CI runs 2k vs 20k, which catches a leak of ~100 bytes per snapshot just as well.
MEMORY_LINES = tuple(
    int(n) for n in os.environ.get("EVALQ_TEST_MEMORY_LINES", "2000,20000").split(",")
)


def test_memory_stays_flat_as_the_input_grows_tenfold(
    tmp_path: Path, redis_url: str, store: Store, producer: Producer
) -> None:
    """tracemalloc peak of a 10x larger backfill is < 1.5x that of the smaller one (real Redis)."""
    send = _sender(producer)
    warm = tmp_path / "warm.jsonl"
    write_lines(warm, 200)
    run_backfill([warm], send, store, batch_size=100)  # imports and caches outside the measure
    peaks: list[int] = []
    for count in MEMORY_LINES:
        source = tmp_path / f"in-{count}.jsonl"
        write_lines(source, count)
        redis.Redis.from_url(redis_url).delete(BACKFILL_QUEUE)
        tracemalloc.start()
        try:
            summary = run_backfill([source], send, store, batch_size=100)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert summary.progress.enqueued == count
        assert queue_length(redis_url, BACKFILL_QUEUE) == count // PER_MESSAGE
    small, large = MEMORY_LINES
    print(f"tracemalloc peaks: {small} {peaks[0] / 1e6:.2f} MB, {large} {peaks[1] / 1e6:.2f} MB")
    assert peaks[1] < 1.5 * peaks[0]


def test_outcome_file_streams_valid_events_and_names_bad_lines(
    tmp_path: Path, redis_url: str, producer: Producer
) -> None:
    """Valid outcome lines reach the outcomes lane; a bad one is rejected by line and field."""
    good = OutcomeEvent(
        event_id="o1",
        trace_id="t1",
        name="refund_reversed",
        value={"amount": 10},
        observed_at=datetime(2025, 1, 2, tzinfo=UTC),
    )
    path = tmp_path / "outcomes.jsonl"
    bad = '{"event_id": "o2", "trace_id": "t2", "observed_at": "2025-01-02T00:00:00Z"}'
    lines = [good.model_dump_json(), "", bad, "not json", good.model_dump_json()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = send_outcomes(path, producer.outcome)
    assert (summary.sent, summary.rejected) == (2, 2)
    missing, broken = summary.rejected_examples
    assert (missing.line, missing.field, missing.code) == (3, "name", "INVALID_FIELD")
    assert (broken.line, broken.code) == (4, "INVALID_JSON")
    assert queue_length(redis_url, LANE_QUEUES[Lane.OUTCOMES]) == 2


def test_rich_progress_shows_read_enqueued_evaluated_failed(tmp_path: Path) -> None:
    """The rich display renders the backfill id and the four counts it is fed."""
    source = tmp_path / "traces.jsonl"
    write_lines(source, 300, bad_every=100)
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=200)
    with rich_progress(console) as update:
        summary = run_backfill(
            [source], lambda b: None, None, progress=update, evaluated=lambda _id: (5, 2)
        )
    text = buffer.getvalue()
    assert summary.backfill_id in text
    assert "read 297 · enqueued 297 · evaluated 5 · failed 2 · rejected lines 3" in text


def _stopped_after_one_batch(
    source: Path, store: Store, stop: dict[str, bool]
) -> tuple[BackfillSummary, list[Snapshot]]:
    """Backfill ``source`` in batches of 10 with a stop hook reading ``stop``; check that it
    stopped after sending exactly the first batch; (summary, snapshots sent)."""
    sent: list[Snapshot] = []
    summary = run_backfill(
        [source], sent.extend, store, batch_size=10, should_stop=lambda _: stop["requested"]
    )
    assert summary.stopped
    assert (summary.progress.enqueued, len(sent)) == (10, 10)
    return summary, sent


def test_a_validation_error_while_a_stop_is_requested_ends_the_run_as_stopped(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid line's ValueError under a stop request ends the run stopped; else it is raised."""
    # A signal swallowed mid-validation surfaces as that ValueError; the run stops at its last
    # checkpoint, so a resume reads the line again.
    source = tmp_path / "traces.jsonl"
    write_lines(source, 30)
    stop = {"requested": False}

    def interrupted(snapshot: Snapshot, **changes: Any) -> Snapshot:
        if snapshot.trace_id.endswith("15"):  # mid-way through the second batch
            stop["requested"] = True
            raise ValueError("1 validation error for Snapshot")
        return replace_fields(snapshot, **changes)

    monkeypatch.setattr(backfill_module, "replace_fields", interrupted)
    _, sent = _stopped_after_one_batch(source, store, stop)
    with pytest.raises(ValueError, match="validation error"):
        run_backfill([source], sent.extend, batch_size=10, should_stop=lambda _: False)


def test_a_line_rejected_while_a_stop_is_requested_is_read_again_by_the_resume(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line rejected under a stop request is sent by the resume, which reports every rejection."""
    # A signal swallowed inside validation rejects a valid line; the stopped run does not send that
    # batch and reports only what its checkpoints cover; the resume sends every valid line once.
    source = tmp_path / "traces.jsonl"
    bad = write_lines(source, 40, bad_every=8)  # lines 8, 16, 24, 32, 40
    original = reader_module._line
    stop = {"requested": False}

    def swallowed(run: Any, line: int, text: str) -> Iterator[Any]:
        if line == 14 and not stop["requested"]:  # in the second batch of 10
            stop["requested"] = True
            run.reject(line, "messages[0].role", "INVALID_FIELD", "a swallowed signal")
            return iter(())
        return original(run, line, text)

    monkeypatch.setattr(reader_module, "_line", swallowed)
    first, sent = _stopped_after_one_batch(source, store, stop)
    assert [r.line for r in first.rejected_examples] == [8]
    assert first.progress.rejected == 1
    second = run_backfill([source], sent.extend, store, batch_size=10, resume=first.backfill_id)
    assert not second.stopped
    assert [r.line for r in second.rejected_examples] == [8, 16, 24, 32, 40]
    ids = [s.trace_id for s in sent]
    assert len(ids) == len(set(ids)) == 40 - bad


def test_a_run_stopped_before_its_first_batch_can_be_resumed(tmp_path: Path, store: Store) -> None:
    """A run stopped before its first batch sends nothing; its id resumes from the first line."""
    # Its id is printed as resumable, so it must not be refused as UNKNOWN_BACKFILL.
    source = tmp_path / "traces.jsonl"
    write_lines(source, 25)
    sent: list[Snapshot] = []
    first = run_backfill([source], sent.extend, store, batch_size=10, should_stop=lambda _: True)
    assert first.stopped
    assert (first.progress.enqueued, sent) == (0, [])
    second = run_backfill([source], sent.extend, store, batch_size=10, resume=first.backfill_id)
    assert (second.stopped, second.progress.enqueued, len(sent)) == (False, 25, 25)
