"""Run every figure of issues 6 and 17 in turn and print one table (each is also runnable alone).

Figures: P1 judge-bound throughput, P2 batched vs Celery's per-message ceiling, P3 producer
enqueue rate and memory, P4 judge that never answers, P5 worker memory over 100k snapshots,
live latency under a saturating backfill, where an evaluation's CPU goes against the X0 >= 1.3 N
budget (``bench/path_cost.py``), and issue 17's lane figures (``bench/lanes.py``: the
user-facing commands on SQLite and PostgreSQL, with their live-lane curve tables printed as they
finish). Each starts and stops its own Redis, judge server and workers. About 30 minutes on 2
cores; ``--quick`` runs tiny sizes (a smoke run: its figures mean nothing). The machine's load
average is printed with every row: re-run when it is high.

Run: ``.venv/bin/python bench/run_all.py [--quick]``
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

from bench import (
    lanes,
    live_latency,
    p1_judge_bound,
    p2_batched_ceiling,
    p3_producer,
    p4_stalled_judge,
    p5_worker_memory,
    path_cost,
)
from bench._kit import Row, table

__all__ = ["FIGURES", "main"]

FIGURES: tuple[tuple[str, Callable[[bool], list[Row]]], ...] = (
    ("P1", p1_judge_bound.run),
    ("P2", p2_batched_ceiling.run),
    ("P3", p3_producer.run),
    ("P4", p4_stalled_judge.run),
    ("P5", p5_worker_memory.run),
    ("live", live_latency.run),
    ("path", path_cost.run),
    ("lanes", lanes.run),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the figures (``--quick`` for a smoke run); exit 1 if any row fails (full runs only)."""
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    rows: list[Row] = []
    started = time.monotonic()
    for name, run in FIGURES:
        began = time.monotonic()
        rows.extend(run(quick))
        print(f"[{name} done in {time.monotonic() - began:.0f} s]", file=sys.stderr, flush=True)
    mode = ", quick mode" if quick else ""
    print(f"evalq figures ({os.cpu_count()} CPUs{mode}, {time.monotonic() - started:.0f} s)")
    print(table(rows))
    return 0 if quick or all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
