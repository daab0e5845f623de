"""The limit by the loop's lag: untouched by a loop with room, shrinks on a backlog, grows back."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from producer import Lane
from producer.snapshot import EVALUATE_TASK
from tests.queue.queue_kit import example_snapshots, variants
from worker import runtime
from worker.handling import Delivery, Handler, Verdict
from worker.in_flight_limit import InFlightLimit
from worker.judges import SyntheticJudge
from worker.loop_lag_limit import (
    GROWTH_SHARE,
    HIGH_S,
    LOW_S,
    MIN_SAMPLES,
    SAMPLE_S,
    WINDOW,
    WINDOW_S,
    LoopLagLimit,
)
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.slots import Slots
from worker.store import Store

_BACKLOG_S = 1.2 * HIGH_S  # a window of these spans less than WINDOW_S; the cut is 3/4
_IDLE_S = LOW_S / 4


def _windows(limit: LoopLagLimit, lag_s: float, windows: int, in_flight: int | None = None) -> None:
    """``windows`` windows of one lag, with ``in_flight`` (default: every allowed slot) in use."""
    for _ in range(windows * WINDOW):
        limit.observe(lag_s, limit.current if in_flight is None else in_flight)


def test_it_starts_at_its_ceiling_and_a_loop_with_room_keeps_it_there() -> None:
    """No lag with every slot in use: the limit stays at the ceiling, never above it."""
    limit = LoopLagLimit(1024)
    assert (limit.floor, limit.current) == (128, 1024)
    _windows(limit, _IDLE_S, 20)
    assert limit.current == 1024


def test_a_backlog_shrinks_it_to_three_quarters_of_what_was_in_flight_down_to_its_floor() -> None:
    """Median lag above HIGH_S: 3/4 of the busiest count per window, never below the floor."""
    limit = LoopLagLimit(1024)
    _windows(limit, _BACKLOG_S, 1, in_flight=800)
    assert limit.current == 600
    _windows(limit, _BACKLOG_S, 20)
    assert limit.current == limit.floor == 128


def test_it_says_lagging_after_a_window_above_high_s_until_a_window_below() -> None:
    """lagging follows the last decided window's median, not a single sample."""
    limit = LoopLagLimit(1024)
    assert not limit.lagging
    limit.observe(_BACKLOG_S, 1024)  # one sample decides nothing
    assert not limit.lagging
    _windows(limit, _BACKLOG_S, 1)
    assert limit.lagging
    _windows(limit, HIGH_S, 1)  # at HIGH_S exactly: not above it
    assert not limit.lagging


def test_a_burst_within_a_window_does_not_move_it() -> None:
    """A few late samples (a fetch's worth starting at once) leave the window's median low."""
    limit = LoopLagLimit(1024)
    for i in range(WINDOW):
        limit.observe(0.3 if i < WINDOW // 2 - 1 else _IDLE_S, 1024)
    assert limit.current == 1024


def test_a_loop_lagging_seconds_is_judged_early_and_cut_in_proportion() -> None:
    """Lags of seconds close a window once it spans WINDOW_S; the cut keeps HIGH_S / lag."""
    # 0.5 s samples: 4 close a window (not WINDOW) and keep 1/5 (not 3/4); a 2 s lag then
    # closes the next window at MIN_SAMPLES and cuts to the floor.
    limit = LoopLagLimit(4096)
    samples = 0
    while (samples + 1) * (SAMPLE_S + 0.5) < WINDOW_S:
        limit.observe(0.5, 4000)
        samples += 1
    assert (samples, limit.current) == (3, 4096)
    limit.observe(0.5, 4000)
    assert limit.current == 800
    for _ in range(MIN_SAMPLES):
        limit.observe(2.0, 800)
    assert limit.current == limit.floor == 512


def test_a_moderate_backlog_is_cut_by_its_lag_ratio() -> None:
    """A window's median of twice HIGH_S halves what was in flight (lower than 3/4)."""
    limit = LoopLagLimit(1024)
    for _ in range(WINDOW):
        limit.observe(2 * HIGH_S, 800)
    assert limit.current == 400


def test_it_grows_back_step_by_step_only_while_it_is_used_and_the_loop_has_room() -> None:
    """It grows ceiling/GROWTH_SHARE per window only if fully used and lag is below LOW_S."""
    limit = LoopLagLimit(1024)
    _windows(limit, _BACKLOG_S, 20)
    _windows(limit, _IDLE_S, 3, in_flight=10)
    assert limit.current == 128
    _windows(limit, (LOW_S + HIGH_S) / 2, 3)
    assert limit.current == 128
    _windows(limit, _IDLE_S, 1)
    assert limit.current == 128 + 1024 // GROWTH_SHARE
    _windows(limit, _IDLE_S, 2 * GROWTH_SHARE)
    assert limit.current == 1024


def test_it_refuses_a_ceiling_below_one() -> None:
    """A ceiling of 0 is a bug in the caller: ValueError."""
    with pytest.raises(ValueError, match="ceiling"):
        LoopLagLimit(0)


def test_slots_hold_to_the_lower_of_the_judge_limit_and_the_loop_guard() -> None:
    """With both limits set, slots in use stay within the lower one."""
    guard = LoopLagLimit(64)
    _windows(guard, _BACKLOG_S, 1, in_flight=40)  # 30
    slots = Slots(64, limit=InFlightLimit(64), guard=guard)  # the judge limit starts at 16
    assert slots._open() == 16
    slots.limit = None
    assert slots._open() == 30
    slots.guard = None
    assert slots._open() == 64


async def _block(loop: asyncio.AbstractEventLoop, turns: int) -> None:
    """Hold the loop ~2.5 x HIGH_S at each of ``turns`` turns (a CPU-bound backlog)."""
    for _ in range(turns):
        time.sleep(2.5 * HIGH_S)  # noqa: ASYNC251 - blocking the loop is the point
        await asyncio.sleep(0)


def test_a_runtime_whose_loop_is_blocked_lowers_its_limit_and_a_warm_shutdown_opens_it(
    store: Store,
) -> None:
    """A runtime's loop blocked ~1.5 s shrinks its guard; stop_adapting drops it for the drain."""
    rt = Runtime(load_settings(concurrency=64, processes=1), store=store)
    try:
        guard = rt.loop_lag_limit
        assert guard is not None
        assert guard.current == 64
        rt.loop.call_soon_threadsafe(rt.loop.create_task, _block(rt.loop, turns=16))
        deadline = time.monotonic() + 10
        while guard.current == 64 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert guard.current < 64
        rt.stop_adapting()
        deadline = time.monotonic() + 5
        while rt.loop_lag_limit is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rt.loop_lag_limit is None
    finally:
        rt.close()


def _overload_timeouts() -> float:
    return REGISTRY.get_sample_value("evalq_overload_timeouts_total", {"lane": "live"}) or 0.0


def _lag_samples(above_s: float) -> tuple[float, float]:
    """(all loop-lag samples, those above ``above_s``) on the process's registry."""
    count = REGISTRY.get_sample_value("evalq_loop_lag_seconds_count") or 0.0
    within = REGISTRY.get_sample_value("evalq_loop_lag_seconds_bucket", {"le": str(above_s)})
    return count, count - (within or 0.0)


def _timed_out_live(rt: Runtime, prefix: str) -> Verdict:
    """Handle one live snapshot whose judge answers after the budget (a TIMEOUT record)."""
    snapshot = variants(example_snapshots()["order-42"], 1, prefix)[0]
    delivery = Delivery(EVALUATE_TASK, (snapshot.wire(),), {}, Lane.LIVE, b"{}")
    with runtime.use(rt):
        (verdict,) = rt.call(Handler(rt).handle([delivery]), timeout_s=30.0)
    return verdict


def test_a_timeout_while_the_loop_lags_is_counted_as_the_workers_own(store: Store) -> None:
    """TIMEOUTs are counted as overload only while the loop lags; every lag sample is exported."""
    settings = load_settings(concurrency=64, processes=1, budget_s=0.3)
    rt = Runtime(settings, store=store, judge=SyntheticJudge(delay_s=1.0))
    try:
        before = _overload_timeouts()
        assert _timed_out_live(rt, "room") is Verdict.ACK  # the judge's TIMEOUT, not the loop's
        assert _overload_timeouts() == before
        samples_before, lagging_before = _lag_samples(HIGH_S)
        rt.loop.call_soon_threadsafe(rt.loop.create_task, _block(rt.loop, turns=24))
        guard = rt.loop_lag_limit
        assert guard is not None
        deadline = time.monotonic() + 10
        while not guard.lagging and time.monotonic() < deadline:
            time.sleep(0.05)
        assert guard.lagging
        assert _timed_out_live(rt, "lagging") is Verdict.ACK
        assert _overload_timeouts() == before + 1
        samples, lagging = _lag_samples(HIGH_S)
        assert samples > samples_before
        assert lagging >= lagging_before + MIN_SAMPLES
    finally:
        rt.close()
