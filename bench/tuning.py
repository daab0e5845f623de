"""The per-lane settings the figures run with: the defaults, nothing tuned per figure.

The worker's execution model needs no tuning knobs (docs/concurrency.md): every figure starts
``python -m worker`` with only the concurrency it measures, and producers send with their
default batch size. Kept as one place so a figure cannot drift from the defaults unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.settings import Settings

__all__ = ["BACKFILL", "LIVE", "LaneTuning"]

_DEFAULT_BATCH = Settings.model_fields["batch_size"].default


@dataclass(frozen=True)
class LaneTuning:
    """The producer batch size of a lane (the default) and the worker's environment."""

    batch_size: int

    def env(self, concurrency: int) -> dict[str, str]:
        """Worker settings for ``concurrency`` evaluations in flight (nothing else)."""
        return {"concurrency": str(concurrency)}

    def in_one_process(self) -> dict[str, str]:
        """The extra setting of a figure defined for one consumer process (P1)."""
        return {"processes": "1"}


BACKFILL = LaneTuning(batch_size=_DEFAULT_BATCH)
"""Throughput first: what ``evalq backfill`` sends by default."""
LIVE = LaneTuning(batch_size=1)
"""Latency first: one snapshot per message (``evalq enqueue --lane live``)."""
