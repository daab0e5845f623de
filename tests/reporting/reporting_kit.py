"""A store filled by a real run, for the ``evalq status`` / ``evalq report`` acceptance tests.

:func:`fill` drives the real pipeline — a private Redis, one ``python -m worker`` subprocess, a
SQLite store in a temporary directory, the synthetic judge — with a mixed set of work:

- the shipped examples on the live lane (no labels, default sampling);
- gold-labelled variants of the examples with slices (agent version, environment, tool) that
  go through a real :class:`~producer.Sampler` (canary at 1.0, the rest at 0.5), so the
  sampled ones carry weights 1 or 2 and the sampler's tally (sampled-out counts) is sent to the
  worker as the ``evalq.sampling_tally`` task;
- a backfill over the examples stopped after its first batch (a *running* backfill with a
  checkpoint);
- outcome events for some labelled traces (linked to their evaluations);
- one undecodable message (a dead letter).

It waits (bounded) until the store holds everything, and returns what it sent.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from producer import OutcomeEvent, Producer, Sampler, SamplingRule, Snapshot, run_backfill
from producer.snapshot import EVALUATE_TASK, TALLY_TASK, GoldLabel, Lane, SliceMeta
from tests.queue.queue_kit import EXAMPLES, WorkerProcess, example_snapshots, wait_until, worker_env
from worker.broker import broker_transport_options
from worker.settings import load_settings
from worker.store import Store, open_store

__all__ = [
    "BACKFILL_ID",
    "BACKFILL_UNITS",
    "EVALQ",
    "Filled",
    "evalq",
    "fill",
    "labelled_candidates",
    "query",
]

BACKFILL_ID = "bf-reporting"
BACKFILL_UNITS = 4
"""Units the backfill sends: the shipped examples, which the live lane sent first."""
EVALQ = Path(sys.executable).with_name("evalq")
_BASES = ("order-42", "refund-ungrounded", "care-no-tools", "store-hours-grounded")


def labelled_candidates(count: int = 20) -> list[Snapshot]:
    """Variants of four examples with gold labels and slice metadata (before sampling)."""
    examples = example_snapshots()
    made = []
    for i in range(count):
        wire = examples[_BASES[i % len(_BASES)]].wire()
        labels = {
            "tool_choice": GoldLabel(label="correct" if i % 3 else "wrong_tool"),
            "grounded": GoldLabel(passed=i % 2 == 0),
            "used_tool_result": GoldLabel(passed=True),
        }
        meta = SliceMeta(
            agent_version="v1" if i < count // 2 else "v2",
            environment="canary" if i % 4 == 0 else "prod",
            tool="get_order" if i % 2 else "refund_order",
        )
        made.append(
            Snapshot.model_validate(
                {**wire, "trace_id": f"gold-{i}", "labels": labels, "slice": meta}
            )
        )
    return made


@dataclass(frozen=True)
class Filled:
    """What :func:`fill` sent, and where it lives."""

    broker_url: str
    store_url: str
    db_path: Path
    workdir: Path
    worker: WorkerProcess
    live_ids: tuple[str, ...]
    labelled_ids: tuple[str, ...]
    sampled_out: int
    outcome_traces: tuple[str, ...]

    def env(self, **extra: str) -> dict[str, str]:
        """``EVALQ_*`` settings of a CLI run against this store and broker."""
        return {"broker_url": self.broker_url, "store_url": self.store_url, **extra}


def _producer(broker_url: str) -> Producer:
    config = load_settings(broker_url=broker_url)
    return Producer(broker_url, transport_options=broker_transport_options(config, broker_url))


def _sample(producer: Producer) -> tuple[list[Snapshot], int]:
    """Sample the labelled candidates, enqueue the kept ones, send the sampler's tally."""
    sampler = Sampler(
        [SamplingRule(name="canary", rate=1.0, environment="canary")],
        default_rate=0.5,
        default_rule="half",
    )
    kept = [s for s in (sampler.sample(c) for c in labelled_candidates()) if s is not None]
    producer.enqueue_many(kept, lane=Lane.LIVE)
    tally = sampler.drain_tally()
    producer.send_raw(TALLY_TASK, tally.wire(), lane=Lane.OUTCOMES)
    return kept, sum(row.sampled_out for row in tally.rows)


def _outcomes(producer: Producer, traces: Sequence[str]) -> None:
    for n, trace_id in enumerate(traces):
        name = "refund_reversed" if n % 2 == 0 else "complaint"
        producer.outcome(
            OutcomeEvent(
                event_id=f"outcome-{trace_id}",
                trace_id=trace_id,
                name=name,
                value={"amount": 10 * (n + 1)} if name == "refund_reversed" else True,
                observed_at=datetime.now(UTC),
            )
        )


def _backfill(producer: Producer, store: Store) -> None:
    def send(batch: Sequence[Snapshot]) -> None:
        producer.enqueue_many(batch, lane=Lane.BACKFILL, batch_size=len(batch))

    run_backfill(  # one batch, then stop: a partly sent backfill
        [EXAMPLES],
        send,
        store,
        backfill_id=BACKFILL_ID,
        batch_size=4,
        should_stop=lambda progress: progress.batches >= 1,
    )


def _complete(store: Store, expected: int, links: int) -> bool:
    if store.count_evaluations() < expected or not store.open_dead_letter_counts():
        return False
    if store.backfill_counts(BACKFILL_ID)[0] < BACKFILL_UNITS:  # its sends, of units sent live
        return False
    if not store.sampled_out_counts():
        return False
    return sum(1 for _ in store.iter_linked_outcomes()) >= links


@contextmanager
def fill(broker_url: str, workdir: Path) -> Iterator[Filled]:
    """Run the mixed workload through a real worker; the worker keeps running until exit."""
    db_path = workdir / "evalq.db"
    store_url = f"sqlite:///{db_path}"
    worker = WorkerProcess(
        worker_env(broker_url=broker_url, store_url=store_url, batch_size="4", processes="1"),
        workdir / "worker.log",
    )
    try:
        worker.wait_ready()
        with open_store(store_url) as store, closing(_producer(broker_url)) as producer:
            live = producer.enqueue_many(example_snapshots().values(), lane=Lane.LIVE)
            labelled, sampled_out = _sample(producer)
            traces = tuple(s.trace_id for s in labelled[:4])
            _outcomes(producer, traces)
            _backfill(producer, store)
            producer.send_raw(EVALUATE_TASK, {"schema_version": 1, "bogus": True}, lane=Lane.LIVE)
            # The backfill re-sends the live examples: the same snapshots, so no new evaluation.
            expected = len(live) + len(labelled)
            wait_until(lambda: _complete(store, expected, len(traces)), 60, "the filled store")
        yield Filled(
            broker_url=broker_url,
            store_url=store_url,
            db_path=db_path,
            workdir=workdir,
            worker=worker,
            live_ids=tuple(live),
            labelled_ids=tuple(s.snapshot_id for s in labelled),
            sampled_out=sampled_out,
            outcome_traces=traces,
        )
    finally:
        worker.stop()


def query(db_path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` run directly on the store's SQLite file (read-only connection)."""
    uri = f"file:{db_path}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        return conn.execute(sql, tuple(params)).fetchall()


def evalq(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the ``evalq`` console script with only the given ``EVALQ_*`` settings."""
    command = [str(EVALQ)] if EVALQ.exists() else [sys.executable, "-m", "worker.cli"]
    return subprocess.run(
        [*command, *args],
        env=worker_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
