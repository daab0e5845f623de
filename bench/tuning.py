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


BACKFILL = LaneTuning(batch_size=32, pool_threads=6)
"""Throughput first: 32 snapshots per message, 6 pool threads (6 x 32 = 3 x 64 in process)."""
LIVE = LaneTuning(batch_size=1, pool_threads=None)
"""Latency first: one snapshot per message, one pool thread per evaluation in flight."""
