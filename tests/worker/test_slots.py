"""Evaluation slots: bounded, live first, FIFO within a lane, a cancelled waiter loses nothing."""

from __future__ import annotations

import asyncio

import pytest

from worker.slots import Slots, SlotsClosedError


async def _take(
    slots: Slots, urgent: bool, order: list[str], name: str, hold: asyncio.Event
) -> None:
    async with slots.held(urgent=urgent):
        order.append(name)
        await hold.wait()


@pytest.mark.asyncio
async def test_a_freed_slot_goes_to_a_waiting_live_evaluation_first() -> None:
    """One slot held; two backfill then one live waiter: the live one gets the slot next."""
    slots, hold = Slots(1), asyncio.Event()
    order: list[str] = []
    first = asyncio.create_task(_take(slots, False, order, "first", hold))
    await asyncio.sleep(0)
    waiters = [
        asyncio.create_task(_take(slots, urgent, order, name, hold))
        for name, urgent in (("bf-1", False), ("bf-2", False), ("live", True))
    ]
    await asyncio.sleep(0)
    assert slots.waiting == 3
    hold.set()
    await asyncio.gather(first, *waiters)
    assert order == ["first", "live", "bf-1", "bf-2"]


@pytest.mark.asyncio
async def test_never_more_holders_than_slots() -> None:
    """Ten tasks on three slots: at most three inside at once, all of them get in."""
    slots, inside, most = Slots(3), 0, 0

    async def work(urgent: bool) -> None:
        nonlocal inside, most
        async with slots.held(urgent=urgent):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(work(i % 2 == 0) for i in range(10)))
    assert most == 3
    assert slots.waiting == 0


@pytest.mark.asyncio
async def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    """A waiter cancelled while queued (or right as it was granted) leaves no slot lost."""
    slots, hold = Slots(1), asyncio.Event()
    order: list[str] = []
    holder = asyncio.create_task(_take(slots, False, order, "holder", hold))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(_take(slots, True, order, "cancelled", hold))
    later = asyncio.create_task(_take(slots, False, order, "later", hold))
    await asyncio.sleep(0)
    cancelled.cancel()
    hold.set()
    await asyncio.gather(holder, later)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert order == ["holder", "later"]
    async with slots.held(urgent=False):  # the slot came back
        pass


@pytest.mark.asyncio
async def test_closed_slots_end_every_waiter_and_later_request_unstarted() -> None:
    """After close, waiters and later requests get SlotsClosedError unstarted; the holder frees."""
    slots, hold = Slots(1), asyncio.Event()
    order: list[str] = []
    holder = asyncio.create_task(_take(slots, False, order, "holder", hold))
    await asyncio.sleep(0)
    waiters = [
        asyncio.create_task(_take(slots, urgent, order, name, hold))
        for name, urgent in (("bf", False), ("live", True))
    ]
    await asyncio.sleep(0)
    slots.close()
    for waiter in waiters:
        with pytest.raises(SlotsClosedError):
            await waiter
    with pytest.raises(SlotsClosedError):
        await _take(slots, True, order, "later", hold)
    hold.set()
    await holder
    assert order == ["holder"]
    assert (slots.in_use, slots.waiting) == (0, 0)
