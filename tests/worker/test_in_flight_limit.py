"""The adaptive in-flight limit: grows at the judge's fastest, shrinks when requests queue."""

from __future__ import annotations

import asyncio

import pytest

from worker.in_flight_limit import PROBE_WINDOWS, InFlightLimit
from worker.slots import Slots


def _feed(limit: InFlightLimit, round_trip_s: float, windows: int) -> None:
    """``windows`` windows of identical round trips with every allowed slot in use."""
    for _ in range(windows):
        for _ in range(max(8, limit.current // 4)):
            limit.observe(round_trip_s, limit.current)


def test_it_starts_at_its_floor_and_grows_to_the_ceiling_at_a_steady_round_trip() -> None:
    """Answers as fast as the first ones (nothing queues): the limit climbs to its ceiling."""
    limit = InFlightLimit(256)
    assert (limit.floor, limit.current) == (64, 64)
    _feed(limit, 0.100, 40)
    assert limit.current == 256
    assert limit.no_load_s == pytest.approx(0.100)


def _queueing_judge(limit: InFlightLimit, capacity: int, base_s: float, windows: int) -> None:
    """A judge serving ``capacity`` requests at ``base_s``; more in flight queue (longer trips)."""
    for _ in range(windows):
        for _ in range(max(8, limit.current // 4)):
            limit.observe(base_s * max(1.0, limit.current / capacity), limit.current)


def test_it_settles_near_what_a_queueing_judge_serves_at_its_fastest() -> None:
    """A judge that serves 100 at once: the limit settles just above 100, also after probes."""
    limit = InFlightLimit(256)
    _feed(limit, 0.100, 40)
    assert limit.current == 256
    seen = []
    for _ in range(4 * PROBE_WINDOWS):
        _queueing_judge(limit, 100, 0.100, 1)
        seen.append(limit.current)
    late = [current for current in seen[PROBE_WINDOWS:] if current != limit.floor]
    assert len(late) >= 3 * PROBE_WINDOWS - 3  # a probe window at the floor per period at most
    assert min(late) >= 100
    assert max(late) <= 140
    assert sum(late) / len(late) <= 120


def test_it_stays_above_its_floor() -> None:
    """A judge that serves only 10 at once: the limit goes down to near its floor, never below."""
    limit = InFlightLimit(256)
    _feed(limit, 0.100, 40)
    seen = []
    for _ in range(3 * PROBE_WINDOWS):
        _queueing_judge(limit, 10, 0.100, 1)
        seen.append(limit.current)
    assert min(seen) == limit.floor
    assert max(seen[PROBE_WINDOWS:]) <= 1.25 * limit.floor  # probes read the queue at the floor


def test_a_small_rise_holds_the_limit() -> None:
    """Round trips 5% over the no-load one at 256: an estimated queue of ~12 holds the limit."""
    limit = InFlightLimit(256)
    _feed(limit, 0.100, 40)
    _feed(limit, 0.105, 10)
    assert limit.current == 256


def test_a_lightly_loaded_worker_does_not_grow_the_limit() -> None:
    """Fast answers while under half the limit is in use say nothing: the limit stays put."""
    limit = InFlightLimit(256)
    for _ in range(400):
        limit.observe(0.100, 3)
    assert limit.current == limit.floor


def test_the_no_load_round_trip_is_read_again_every_probe_period() -> None:
    """A judge that became slower for good is re-measured at the floor, then the limit grows."""
    limit = InFlightLimit(64)
    _feed(limit, 0.100, 20)
    assert limit.current == 64
    _feed(limit, 0.300, PROBE_WINDOWS)
    assert limit.no_load_s == pytest.approx(0.300)
    _feed(limit, 0.300, 20)
    assert limit.current == 64


def test_a_probe_ignores_round_trips_of_requests_sent_before_it() -> None:
    """While a probe waits for the backlog to drain, answers with more in flight are not used."""
    limit = InFlightLimit(64)
    _feed(limit, 0.100, 20)
    for _ in range(PROBE_WINDOWS * 64):  # until the probe starts: the limit is at its floor
        limit.observe(0.100, limit.current)
        if limit.current == limit.floor:
            break
    assert limit.current == limit.floor
    for _ in range(100):
        limit.observe(5.0, 64)  # the backlog's answers: ignored
    for _ in range(8):
        limit.observe(0.120, limit.floor)
    assert limit.no_load_s == pytest.approx(0.120)
    assert limit.current == 64


def test_a_ceiling_below_one_is_refused() -> None:
    """A limit with no room at all is a programming error, said at once."""
    with pytest.raises(ValueError, match="at least 1"):
        InFlightLimit(0)


@pytest.mark.asyncio
async def test_slots_stay_within_the_limit_and_wake_waiters_when_it_grows() -> None:
    """8 slots under a limit of 2: two inside; when the limit opens, the waiters get in."""
    limit = InFlightLimit(8)
    slots, hold = Slots(8, limit), asyncio.Event()
    inside: list[int] = []

    async def work(i: int) -> None:
        async with slots.held(urgent=False):
            inside.append(i)
            await hold.wait()

    tasks = [asyncio.create_task(work(i)) for i in range(6)]
    await asyncio.sleep(0.01)
    assert (len(inside), slots.waiting, slots.in_use) == (2, 4, 2)
    slots.limit = None
    slots.wake()
    await asyncio.sleep(0)
    assert (len(inside), slots.waiting) == (6, 0)
    hold.set()
    await asyncio.gather(*tasks)
    assert slots.in_use == 0
