"""The store's share of an evaluation: CPU per evaluation of the group-commit write, by part.

A worker's store threads write every evaluation's rows (the evaluation, its eight metric results,
the audit trail of questions asked, the send and the snapshot) in group-commit transactions. On
SQLite that work runs with the GIL released, so a ``py-spy --gil`` profile of a worker shows
little of it; the threads' own CPU shows all of it (``docs/concurrency.md``, "Sixteenth round").
This bench measures it in-process, away from the broker and the judge:

1. Real records: ``count`` snapshots of the base trace go through the worker's message path
   (``worker.handling.Handler`` on a runtime with the **synthetic** judge, a throw-away SQLite
   store); every ``(evaluation, snapshot)`` pair the group commit hands the store is kept.
2. Each store then writes those pairs again into a fresh database, 64 per call
   (``Store.record_evaluations``, as a backfill's group commit does), and the writing thread's
   CPU time per evaluation is read (``time.thread_time``); on PostgreSQL the server processes'
   CPU for that database is added (read from ``/proc``). The cycle collector is tuned first, as a
   worker process tunes its own (:func:`worker.runtime.tune_gc`).
3. Ablations, each a fresh database: the same writes without the audit trail (the results'
   ``audit`` column left empty, no ``question_texts`` rows) and without the metric results'
   rows. What a part costs is the difference; nothing here is a store a worker would run.

Rounds alternate the variants (the machine's speed drifts); the median of the rounds is printed,
with the bytes each evaluation adds to the database. No targets: figures are printed.

Run: ``.venv/bin/python bench/store_writes.py [--quick] [--store sqlite|postgresql|both]``
(about a minute per store; ``--quick`` checks it runs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._kit import Row, cpu_seconds_matching, fresh_postgres, load_average, snapshots, table
from producer import Lane
from producer.snapshot import EVALUATE_TASK
from worker import runtime
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler
from worker.judges import SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import Store, open_store
from worker.store import _batch as batch_writes
from worker.store import _writes as single_writes
from worker.store._batch import EvaluationItem

__all__ = ["capture", "delivery", "handle_all", "main", "run"]

GROUP = 64
"""Evaluations per ``record_evaluations`` call: a backfill's group commit at full load."""
STORES = ("sqlite", "postgresql")


@dataclass(frozen=True)
class Sizes:
    """How many evaluations to capture and how many alternating rounds to write them."""

    count: int
    rounds: int


FULL = Sizes(count=2000, rounds=3)
QUICK = Sizes(count=128, rounds=1)


class _Recording:
    """A store that keeps every pair the group commit writes (and writes it)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.items: list[EvaluationItem] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record_evaluations(self, items: Sequence[EvaluationItem], *args: Any, **kwargs: Any) -> Any:
        """Keep the pairs, then write them."""
        self.items.extend(items)
        return self._inner.record_evaluations(items, *args, **kwargs)


def capture(count: int) -> list[EvaluationItem]:
    """The ``(evaluation, snapshot)`` pairs of ``count`` base-trace snapshots (synthetic judge)."""
    with (
        tempfile.TemporaryDirectory() as directory,
        open_store(f"sqlite:///{Path(directory) / 'capture.db'}") as store,
    ):
        recording = _Recording(store)
        settings = load_settings(concurrency=GROUP, processes=1)
        rt = Runtime(settings, store=recording, judge=SyntheticJudge())  # type: ignore[arg-type]
        try:
            handle_all(rt, [delivery(s.wire()) for s in snapshots(count, "store-writes")])
        finally:
            rt.close()
    return recording.items


def delivery(item: dict[str, Any], lane: Lane = Lane.BACKFILL) -> Delivery:
    """One snapshot's message as a consumer reads it."""
    return Delivery(EVALUATE_TASK, (item,), {}, lane, raw_bytes(item))


def handle_all(rt: Runtime, deliveries: Sequence[Delivery]) -> None:
    """Hand ``deliveries`` to ``rt``'s message path ``GROUP`` at a time, each group to the end."""
    with runtime.use(rt):
        for start in range(0, len(deliveries), GROUP):
            rt.call(Handler(rt).handle(deliveries[start : start + GROUP]), timeout_s=120.0)


# --- ablations -------------------------------------------------------------------------------


def _without_results(insert: Callable[..., Any]) -> Callable[..., Any]:
    def skip_results(tx: Any, sql: str, rows: Any) -> Any:
        return None if "INTO metric_results" in sql else insert(tx, sql, rows)

    return skip_results


def _nothing(*_args: Any) -> None:
    return None


_PATCHED = (
    (batch_writes, "insert_texts"),
    (batch_writes, "_insert_rows"),
    (single_writes, "audit_json"),
)
"""The writers' module-level helpers an ablation replaces (``worker.store._batch``, ``_writes``)."""


@contextlib.contextmanager
def _variant(name: str) -> Iterator[None]:
    """Patch the writers for one ablation (``full`` patches nothing)."""
    saved = [(module, attr, getattr(module, attr)) for module, attr in _PATCHED]
    if name == "no audit trail":
        setattr(batch_writes, "insert_texts", _nothing)  # noqa: B010 - see _PATCHED
        setattr(single_writes, "audit_json", _nothing)  # noqa: B010
    elif name == "no metric results":
        insert = batch_writes._insert_rows
        setattr(batch_writes, "_insert_rows", _without_results(insert))  # noqa: B010
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


VARIANTS = ("full", "no audit trail", "no metric results")


# --- one write ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Write:
    """One variant written once: CPU µs and bytes per evaluation."""

    cpu_us: float
    bytes_per: float


def _server_cpu_s(url: str) -> float:
    """CPU seconds so far of this machine's PostgreSQL processes serving the database at ``url``
    (0 for SQLite: the writing thread does all of its work)."""
    if not url.startswith("postgresql"):
        return 0.0
    return cpu_seconds_matching(url.rsplit("/", 1)[-1].encode())


def _database_bytes(store: Store, url: str) -> float:
    """The database's size: SQLite's pages (its WAL's included), PostgreSQL's tables with their
    indexes and TOAST."""
    if url.startswith("sqlite"):
        size = "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
    else:
        size = "SELECT sum(pg_total_relation_size(oid)) FROM pg_class WHERE relkind = 'r'"
    return float(store._run(lambda tx: tx.rows(size)[0][0], write=False))


def write_once(url: str, items: list[EvaluationItem], variant: str) -> Write:
    """Write ``items`` into the store at ``url`` (fresh) under ``variant``; CPU per evaluation."""
    with open_store(url) as store, _variant(variant):
        before = _database_bytes(store, url)
        server_s = _server_cpu_s(url)
        started = time.thread_time()
        for start in range(0, len(items), GROUP):
            store.record_evaluations(items[start : start + GROUP])
        cpu_s = time.thread_time() - started + _server_cpu_s(url) - server_s
        grown = _database_bytes(store, url) - before
    return Write(cpu_s * 1e6 / len(items), grown / len(items))


@contextlib.contextmanager
def _fresh(kind: str, tag: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield f"sqlite:///{Path(directory) / f'{tag}.db'}"
    else:
        with fresh_postgres(tag.replace(" ", "_")) as url:
            yield url


# --- the figures ---------------------------------------------------------------------------


def measure(kind: str, items: list[EvaluationItem], rounds: int) -> dict[str, Write]:
    """Median over ``rounds`` of each variant, the variants alternating within a round."""
    writes: dict[str, list[Write]] = {v: [] for v in VARIANTS}
    for round_no in range(rounds):
        for variant in VARIANTS:
            with _fresh(kind, f"sw{round_no}_{variant[:5]}") as url:
                writes[variant].append(write_once(url, items, variant))
    return {
        v: Write(
            statistics.median(w.cpu_us for w in ws), statistics.median(w.bytes_per for w in ws)
        )
        for v, ws in writes.items()
    }


def rows_for(kind: str, result: dict[str, Write], count: int) -> list[Row]:
    """The printed rows of one store: the full write, then what each part costs."""
    full = result["full"]
    load = load_average()
    rows = [
        Row(
            f"{kind} store write",
            full.cpu_us,
            full.cpu_us,
            1.0,
            "printed",
            True,
            "CPU µs per evaluation",
            f"{count} evaluations (synthetic judge) in calls of {GROUP}; "
            f"{full.bytes_per:.0f} bytes each",
            load,
        )
    ]
    for variant, part in (("no audit trail", "audit trail"), ("no metric results", "results")):
        without = result[variant]
        cost = full.cpu_us - without.cpu_us
        rows.append(
            Row(
                f"{kind} {part} share",
                cost,
                full.cpu_us,
                cost / full.cpu_us if full.cpu_us else float("nan"),
                "printed",
                True,
                "CPU µs per evaluation it adds vs the full write",
                f"{full.bytes_per - without.bytes_per:.0f} of {full.bytes_per:.0f} bytes",
                load,
            )
        )
    return rows


def run(quick: bool, stores: Sequence[str] = STORES) -> list[Row]:
    """Capture once, then measure each store."""
    sizes = QUICK if quick else FULL
    items = capture(sizes.count)
    # As a worker process does before it writes anything: at CPython's default threshold the
    # cycle collector added 7-18% to the SQLite write measured here, which no worker pays.
    runtime.tune_gc(runtime.GC_GEN0_THRESHOLD)
    rows: list[Row] = []
    for kind in stores:
        rows += rows_for(kind, measure(kind, items, sizes.rounds), len(items))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``--quick``, ``--store sqlite|postgresql|both``."""
    parser = argparse.ArgumentParser(description="The store's CPU per evaluation, by part")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    parser.add_argument("--store", choices=(*STORES, "both"), default="both")
    args = parser.parse_args(argv)
    stores = STORES if args.store == "both" else (args.store,)
    rows = run(args.quick, stores)
    mode = ", quick mode" if args.quick else ""
    print(f"evalq store writes ({os.cpu_count()} CPUs{mode})")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
