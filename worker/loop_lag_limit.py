"""A limit on evaluations in flight that protects the budget from the worker's own overload.

Why: an evaluation's budget starts when it gets a slot, and by Little's law each one takes
(evaluations in flight) / (evaluations per second) seconds. When the process's CPU is what
bounds the rate (a fast judge, or thousands in flight at a slow one), every slot beyond what the
CPU serves only adds waiting for the event loop inside the budgets. Measured
(docs/concurrency.md, "Twelfth round"): 2,048 in flight at a 1 s judge on a loaded 2-core
machine recorded 4,771 of 6,740 evaluations TIMEOUT, all of it the loop's backlog, none the
judge's. A fixed lower count cannot be the default: at a 1 s judge a CPU with room needs every
slot to reach C/L.

So the limit follows the loop's lag (how late a timer the loop set for itself fires; a loop
with a backlog runs it late): sampled every :data:`SAMPLE_S`, judged per window of
:data:`WINDOW` samples by their median (one burst of work, a fetch's worth starting together,
does not move a median). A loop lagging seconds takes seconds per sample, so a window also
closes once its samples span :data:`WINDOW_S` (at least :data:`MIN_SAMPLES` of them): with ten
samples of ~1 s lag, a slow machine at 2,048 in flight waited ~10 s for its first decision while
nearly every evaluation ran out of budget (docs/concurrency.md, "Thirteenth round").

- median lag above :data:`HIGH_S`: the limit drops to 3/4 of the most evaluations in flight
  during the window (not of the limit, which may be far above what was used), or in proportion
  to the lag when that is lower (``HIGH_S / median``: a 1 s lag keeps a tenth), since a loop's
  backlog grows with the work in flight;
- median lag below :data:`LOW_S` while at least 9/10 of the limit was in use: it grows by
  ``ceiling /`` :data:`GROWTH_SHARE` (a CPU with room gets its slots back within seconds);
- otherwise it holds, within ``[floor, ceiling]``; the floor is ``ceiling //`` :data:`FLOOR_SHARE`.

It starts at its ceiling: a worker that is not CPU-bound never sees it. Slots held back wait as
messages, before their budgets start; the rate of a CPU-bound process does not change, only where
its queue is. Unlike :class:`~worker.in_flight_limit.InFlightLimit` (the judge's round trip, for
lanes beside live) it reads the loop, not the judge: a slow judge is not the worker's overload.
This module is the arithmetic; :class:`~worker.runtime.Runtime` samples the lag (and exports each
sample) and :class:`~worker.slots.Slots` applies the limit. :attr:`LoopLagLimit.lagging` marks an
evaluation that ends while the loop lags, so its TIMEOUTs are counted as the worker's own
(``evalq_overload_timeouts_total``).
"""

from __future__ import annotations

import statistics

__all__ = [
    "FLOOR_SHARE",
    "GROWTH_SHARE",
    "HIGH_S",
    "LOW_S",
    "MIN_SAMPLES",
    "SAMPLE_S",
    "WINDOW",
    "WINDOW_S",
    "LoopLagLimit",
]

SAMPLE_S = 0.05
"""How often the loop's lag is sampled (a timer of this length, and how late it fires)."""
WINDOW = 10
"""Samples per decision (0.5 s)."""
WINDOW_S = 2.0
"""A window also closes once its samples span this long (a lagging loop's samples are slow)."""
MIN_SAMPLES = 3
"""Samples a window needs at least (a median of fewer is one burst)."""
HIGH_S = 0.1
"""A window's median lag above this shrinks the limit: the loop has a backlog of ~0.1 s at every
turn, and an evaluation takes several turns."""
LOW_S = 0.02
"""A window's median lag below this lets a fully used limit grow."""
FLOOR_SHARE = 8
"""The floor is ``ceiling // FLOOR_SHARE`` (at least one)."""
GROWTH_SHARE = 16
"""A limit grows by ``ceiling / GROWTH_SHARE`` per window: from the floor back to the ceiling in
~7 s; growing by half each window overshot into the backlog again (measured: 576 -> 864 -> 648)."""


class LoopLagLimit:
    """How many evaluations may be in flight now, by the event loop's lag."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError("ceiling must be at least 1")
        self.ceiling = ceiling
        self.floor = max(1, ceiling // FLOOR_SHARE)
        self._limit = float(ceiling)
        self._window: list[float] = []
        self._busiest = 0
        self._lagging = False

    @property
    def lagging(self) -> bool:
        """Whether the last decided window's median lag was above :data:`HIGH_S` (the loop has a
        backlog: evaluations ending now spent part of their budget waiting for it)."""
        return self._lagging

    @property
    def current(self) -> int:
        """The limit now (whole evaluations)."""
        return int(self._limit)

    def observe(self, lag_s: float, in_flight: int) -> None:
        """One lag sample, taken with ``in_flight`` evaluations in flight."""
        self._window.append(lag_s)
        self._busiest = max(self._busiest, in_flight)
        count = len(self._window)
        span_s = count * SAMPLE_S + sum(self._window)  # each sample: its timer plus its lag
        if count >= WINDOW or (count >= MIN_SAMPLES and span_s >= WINDOW_S):
            median_s = statistics.median(self._window)
            busiest, self._window, self._busiest = self._busiest, [], 0
            self._lagging = median_s > HIGH_S
            self._limit = min(max(self._next(median_s, busiest), self.floor), self.ceiling)

    def _next(self, median_s: float, busiest: int) -> float:
        if median_s > HIGH_S:
            return min(self._limit, busiest) * min(0.75, HIGH_S / median_s)
        if median_s < LOW_S and busiest * 10 >= self._limit * 9:
            return self._limit + self.ceiling / GROWTH_SHARE
        return self._limit
