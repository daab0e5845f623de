"""The per-lane worker settings the figures run with (chosen by measurement: docs/concurrency.md).

Every figure starts its workers with these, so the table measures the recommended configuration
and nothing tuned per figure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKFILL", "LIVE", "LaneTuning"]


@dataclass(frozen=True)
class LaneTuning:
    """``EVALQ_BATCH_SIZE`` and ``EVALQ_POOL_THREADS`` of one lane's workers."""

    batch_size: int
    pool_threads: int | None

    def env(self, concurrency: int) -> dict[str, str]:
        """Worker settings for ``concurrency`` evaluations in flight."""
        values = {"concurrency": str(concurrency), "batch_size": str(self.batch_size)}
        if self.pool_threads is not None:
            values["pool_threads"] = str(self.pool_threads)
        return values


BACKFILL = LaneTuning(batch_size=64, pool_threads=3)
"""Throughput first: 64 snapshots per message, 3 pool threads (192 in the process: 3 x 64).

Measured against 32 x 6 (same 192 snapshots in the process): fewer threads contend for the GIL,
so less CPU per snapshot (P1 0.81/0.81 against 0.61-0.74) and shorter store transactions under
that contention (live P95 130-136 ms beside it); docs/concurrency.md."""
LIVE = LaneTuning(batch_size=1, pool_threads=None)
"""Latency first: one snapshot per message, one pool thread per evaluation in flight."""
