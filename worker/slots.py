"""Evaluation slots with live first: a freed slot goes to a waiting live evaluation before any
waiting backfill one.

A worker that serves both lanes holds backfill batches (several snapshots per message) beside
live messages; with a plain ``asyncio.Semaphore`` a live snapshot queued behind hundreds of held
backfill snapshots waited several evaluation rounds for a slot (measured: live P95 789 ms beside
a saturating backfill at a 100 ms judge, `bench/lanes.py`). asyncio has no priority semaphore,
hence these few lines: two FIFO queues of waiters, urgent first; FIFO within each.

With an :class:`~worker.in_flight_limit.InFlightLimit` the slots in use stay within its current
limit as well (the non-live lanes of a worker that serves live too: see that module); a slot
freed above the limit is not handed on, and :meth:`wake` hands out slots the limit has grown by.
A :class:`~worker.loop_lag_limit.LoopLagLimit` (``guard``, every runtime's) bounds them the same
way, by the event loop's lag; the lower of the two applies.

At a warm shutdown :meth:`Slots.close` hands out no more slots: every evaluation still waiting
for one, and any that asks later, ends with :class:`SlotsClosedError` before it starts, so its
message can go back to the broker at once instead of holding the shutdown for its turn.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

from worker.in_flight_limit import InFlightLimit
from worker.loop_lag_limit import LoopLagLimit

__all__ = ["Slots", "SlotsClosedError"]


class SlotsClosedError(Exception):
    """No slot will be given: the worker is shutting down and this evaluation never started."""


class Slots:
    """``count`` evaluation slots; :meth:`held` waits for one (urgent waiters go first)."""

    def __init__(
        self,
        count: int,
        limit: InFlightLimit | None = None,
        guard: LoopLagLimit | None = None,
    ) -> None:
        if count < 1:
            raise ValueError("at least one slot")
        self.count = count
        self.limit = limit
        self.guard = guard
        self.in_use = 0
        self.closed = False
        self._urgent: collections.deque[asyncio.Future[None]] = collections.deque()
        self._other: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Evaluations waiting for a slot."""
        return len(self._urgent) + len(self._other)

    @contextlib.asynccontextmanager
    async def held(self, *, urgent: bool) -> AsyncIterator[None]:
        """Hold one slot for the block."""
        await self._acquire(urgent)
        try:
            yield
        finally:
            self._release()

    def _open(self) -> int:
        """Slots that may be in use now."""
        open_now = self.count
        for limit in (self.limit, self.guard):  # the lower of the two, when set
            if limit is not None:
                open_now = min(open_now, limit.current)
        return open_now

    def close(self) -> None:
        """Give no more slots: waiters, and later requests, get :class:`SlotsClosedError`."""
        self.closed = True
        for queue in (self._urgent, self._other):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_exception(SlotsClosedError())

    async def _acquire(self, urgent: bool) -> None:
        if self.closed:
            raise SlotsClosedError
        if self.in_use < self._open() and not self.waiting:
            self.in_use += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._other).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled() and granted.exception() is None:
                self._release()  # granted just as it was cancelled: give the slot back
            else:
                granted.cancel()  # skipped by _grant_next
            raise

    def _release(self) -> None:
        self.in_use -= 1
        self.wake()

    def wake(self) -> None:
        """Hand open slots to waiters (after a release, or when the limit has grown)."""
        while self.in_use < self._open() and self._grant_next():
            self.in_use += 1

    def _grant_next(self) -> bool:
        for queue in (self._urgent, self._other):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return True
        return False
