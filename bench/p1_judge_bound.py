"""P1: end to end against a 100 ms judge with 64 requests in flight in ONE worker process.

Ideal = in-flight / latency = 64 / 0.1 s = 640 judge requests/s. Measured = evaluations/s x
judge requests per evaluation (read back from the store: the ``agent`` set packs the base trace
into exactly one request, and the figure checks it). The backfill queue is filled first, then one
worker (``EVALQ_CONCURRENCY=64``, backfill batches) drains it through the real path: broker →
worker → System One wire client → judge server (its own process) → SQLite store. The rate is taken
between the 10th and 90th percentile of the records' ``created_at`` (start-up and drain excluded).

Target: measured / ideal ≥ 0.70. Run: ``.venv/bin/python bench/p1_judge_bound.py [--quick]``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench._kit import (
    Bench,
    Row,
    created_times,
    drain_cpu,
    fill_backfill,
    load_average,
    main_for,
    middle_rate,
)
from bench.tuning import BACKFILL

__all__ = ["run"]

LATENCY_MS = 100.0
IN_FLIGHT = 64
TARGET = 0.70


def run(quick: bool) -> list[Row]:
    """Measure P1 once; one table row."""
    count = 96 if quick else 8000
    with Bench("p1") as bench:
        judge_url = bench.judge_server(LATENCY_MS)
        fill_backfill(bench.broker_url, count, "p1", BACKFILL.batch_size)
        # The figure is defined for one worker process: no evaluator processes here.
        one = BACKFILL.in_one_process()
        worker = bench.worker(judge_url, {"lanes": "backfill", **BACKFILL.env(IN_FLIGHT), **one})
        cores = drain_cpu(bench.store_path, count, worker, timeout_s=60 + count / 50)
        rows = created_times(bench.store_path)
    per_evaluation = sum(requests for _, requests in rows) / len(rows)
    measured = middle_rate([at for at, _ in rows]) * per_evaluation
    ideal = IN_FLIGHT / (LATENCY_MS / 1000)
    ratio = measured / ideal
    return [
        Row(
            figure="P1 judge-bound, 64 in flight",
            measured=measured,
            baseline=ideal,
            ratio=ratio,
            target=f">= {TARGET:.2f}",
            passed=ratio >= TARGET and per_evaluation == 1.0,
            unit="judge requests/s vs ideal in-flight/latency",
            note=f"{len(rows)} evaluations, {per_evaluation:.2f} requests each; "
            f"one consumer process, batches of {BACKFILL.batch_size}; "
            f"worker CPU {cores:.2f} cores",
            load=load_average(),
        )
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry."""
    return main_for("P1: judge-bound throughput, one worker process", run, argv)


if __name__ == "__main__":
    sys.exit(main())
