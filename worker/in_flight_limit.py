"""An adaptive limit on evaluations in flight: TCP Vegas on the judge's round trip.

Why: a backfill beside a live lane keeps every slot busy, and at a judge that is the
bottleneck (or a machine that is) evaluations beyond what the judge serves at its no-load
round trip only queue: in the worker's loop and at the judge, where a live request waits behind
them. Measured (docs/concurrency.md, "Ninth round"): 256 backfill evaluations in flight gave a
live P95 of 235-273 ms at a 100 ms judge, 64 gave 182 ms, with the same backfill drain. A fixed
lower number cannot be the default: at a 1 s judge the backfill needs all 256 to reach 256/s. So
the limit follows the round trip: it grows while the judge answers near its fastest, and shrinks
when the answers slow down because requests queue.

The rule (Vegas, as TCP Vegas and Netflix's concurrency-limits use it), applied once per window
of round trips rather than per request (a window's median is steadier than single samples):

- ``no_load_s`` is the smallest window median seen; every :data:`PROBE_WINDOWS` windows the
  limit drops to its floor for one window, whose median (of requests sent at the floor) becomes
  the new ``no_load_s`` (a judge that became slower for good is not read as queueing forever,
  and a queue that lasted is not read as the judge's speed, as a plain reset would);
- the estimated queue is ``limit x (1 - no_load_s / median_s)``;
- with ``t = log10(limit)`` (at least 1): queue <= t grows the limit by ``6t``, queue < ``3t``
  by ``t``, queue > ``6t`` shrinks it by at least ``t`` (half the excess over ``6t``), otherwise
  it holds;
- it never grows while under half of it is in use (a lightly loaded worker says nothing about
  the judge's capacity), and stays within ``[floor, ceiling]``.

It starts at its floor and grows, so the first windows measure the judge unloaded. The floor is
a quarter of the ceiling (:data:`FLOOR_SHARE`), which bounds how much longer held messages can
wait for a slot than with the fixed count; at a warm shutdown the runtime opens every slot again
(``Runtime.stop_adapting``), so the drain stays within ``Settings.longest_task_s``.

Not a library: aioadaptive (the one asyncio Vegas limiter on PyPI) is a semaphore of its own
without the live-first waiting :class:`~worker.slots.Slots` does; this module is the arithmetic
only, and :class:`~worker.slots.Slots` applies the limit.
"""

from __future__ import annotations

import math
import statistics

__all__ = ["FLOOR_SHARE", "PROBE_WINDOWS", "InFlightLimit"]

FLOOR_SHARE = 4
"""The floor is ``ceiling // FLOOR_SHARE`` (at least one)."""
PROBE_WINDOWS = 64
"""Every this many windows the no-load round trip is re-read from the next window."""
_MIN_WINDOW = 8


class InFlightLimit:
    """How many evaluations may be in flight now, between ``floor`` and ``ceiling``."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError("ceiling must be at least 1")
        self.ceiling = ceiling
        self.floor = max(1, ceiling // FLOOR_SHARE)
        self._limit = float(self.floor)
        self._window: list[float] = []
        self._busiest = 0
        self._no_load_s: float | None = None
        self._probe_from: float | None = None
        self._windows = 0

    @property
    def current(self) -> int:
        """The limit now (whole evaluations)."""
        return int(self._limit)

    @property
    def no_load_s(self) -> float | None:
        """The judge's round trip when nothing queues, as measured so far (None: no window yet)."""
        return self._no_load_s

    def observe(self, round_trip_s: float, in_flight: int) -> None:
        """One judge round trip that ended with ``in_flight`` evaluations in flight."""
        if self._probe_from is not None and in_flight > self.floor:
            return  # a probe measures requests sent at the floor, not the backlog before it
        self._window.append(round_trip_s)
        self._busiest = max(self._busiest, in_flight)
        if len(self._window) >= max(_MIN_WINDOW, self.current // 4):
            median_s = statistics.median(self._window)
            busiest, self._window, self._busiest = self._busiest, [], 0
            self._end_window(median_s, busiest)

    def _end_window(self, median_s: float, busiest: int) -> None:
        self._windows += 1
        if self._no_load_s is None or self._probe_from is not None:
            self._no_load_s = median_s  # measured at the floor: what the judge does unloaded
            self._limit = self._probe_from or self._limit
            self._probe_from = None
            return
        self._no_load_s = min(self._no_load_s, median_s)
        if self._windows % PROBE_WINDOWS == 0:  # also at the floor: a slower judge is re-read
            self._probe_from, self._limit = self._limit, float(self.floor)
            return
        self._limit = min(max(self._next(median_s, busiest), self.floor), self.ceiling)

    def _next(self, median_s: float, busiest: int) -> float:
        assert self._no_load_s is not None  # set by the first window
        limit = self._limit
        step = math.log10(max(limit, 10.0))  # at least 1: small limits still move
        queue = limit * (1.0 - self._no_load_s / median_s) if median_s > 0 else 0.0
        if queue > 6 * step:
            return limit - max(step, (queue - 6 * step) / 2)
        if busiest * 2 < limit:
            return limit  # app-limited: nothing learnt about the judge
        if queue <= step:
            return limit + 6 * step
        if queue < 3 * step:
            return limit + step
        return limit
