"""The per-lane worker settings the figures run with (chosen by measurement: docs/concurrency.md).

Every figure starts its workers with these, so the table measures the recommended configuration
and nothing tuned per figure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKFILL", "LIVE", "LaneTuning"]


@dataclass(frozen=True)
class LaneTuning:
    """``EVALQ_BATCH_SIZE``, ``EVALQ_POOL_THREADS``, ``EVALQ_EVALUATOR_PROCESSES`` of a lane."""

    batch_size: int
    pool_threads: int | None
    evaluator_processes: int = 0

    def env(self, concurrency: int) -> dict[str, str]:
        """Worker settings for ``concurrency`` evaluations in flight."""
        values = {"concurrency": str(concurrency), "batch_size": str(self.batch_size)}
        if self.pool_threads is not None:
            values["pool_threads"] = str(self.pool_threads)
        if self.evaluator_processes:
            values["evaluator_processes"] = str(self.evaluator_processes)
        return values

    def in_one_process(self) -> LaneTuning:
        """The same shape evaluated in the worker process itself (no evaluator processes)."""
        return LaneTuning(self.batch_size, self.pool_threads, 0)


BACKFILL = LaneTuning(batch_size=64, pool_threads=4, evaluator_processes=2)
"""Throughput first: 64 snapshots per message, 4 pool threads, 2 evaluator processes (one per
core of the 2-core machine), each holding 2 messages and 32 of the 64 evaluation slots.

One process holds one GIL: the threads worker alone drained P2's workload at 617/s with 1.1
cores, with 2 evaluator processes at 788-1050/s (docs/concurrency.md, sixth round). Earlier,
64 x 3 in one process was measured against 32 x 6: fewer threads contend for the GIL, so less CPU
per snapshot and shorter store transactions (live P95 130-136 ms beside it)."""
LIVE = LaneTuning(batch_size=1, pool_threads=None)
"""Latency first: one snapshot per message, one pool thread per evaluation in flight."""
