"""The message path in-process (``runtime.use``): micro-batches, group commit, backstop, faults.

No worker process and no broker: deliveries are built as the consumer builds them, handled on
a real runtime (its own loop thread) with a real SQLite store, and the verdicts checked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import stamina

from producer import Lane, Snapshot
from producer.snapshot import EVALUATE_TASK, OUTCOME_TASK, TALLY_TASK
from tests.queue.queue_kit import example_snapshots, variants
from worker import handling, runtime
from worker.canonical_json import canonical_json
from worker.committer import Committer
from worker.dead_letters import DeadLetterCode, raw_bytes, redrive
from worker.handling import Delivery, Handler, Verdict
from worker.judges import JudgeRequest, JudgeResponse, SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import (
    DeadLetterRecord,
    EvaluationRecord,
    PermanentStoreError,
    Store,
    TransientStoreError,
    Written,
    open_store,
)
from worker.store._batch import EvaluationItem


class CountingJudge:
    """The synthetic judge with a real (asyncio) delay, counting requests in flight."""

    def __init__(self, delay_s: float) -> None:
        self._inner = SyntheticJudge(delay_s=delay_s)
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = 0

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        self.in_flight += 1
        self.calls += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self._inner(request)
        finally:
            self.in_flight -= 1


class DeafJudge:
    """A judge that ignores cancellation and never answers (only the backstop ends it).

    Closing it (the runtime does, at close) ends its abandoned requests, so no task of the
    test is left pending when the loop stops.
    """

    def __init__(self) -> None:
        self.calls = 0
        self._waiting: list[asyncio.Future[JudgeResponse]] = []

    async def aclose(self) -> None:
        for never in self._waiting:
            never.set_exception(ConnectionError("closed"))

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        self.calls += 1
        never: asyncio.Future[JudgeResponse] = asyncio.get_running_loop().create_future()
        self._waiting.append(never)
        while True:
            try:
                return await asyncio.shield(never)
            except asyncio.CancelledError:
                continue


class CountingStore:
    """A real store whose record_evaluations calls are counted (group-commit sizes)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.groups: list[int] = []

    def record_evaluations(
        self, items: Sequence[EvaluationItem], urgent: bool = False, sends: Sequence[Any] = ()
    ) -> list[Written]:
        self.groups.append(len(items))
        return self._store.record_evaluations(items, urgent, sends)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def store(workdir: Path) -> Iterator[Store]:
    """A SQLite store of this test."""
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as opened:
        yield opened


@pytest.fixture(autouse=True)
def _fast_retries() -> Iterator[None]:
    """stamina's testing mode: retries without waiting (bounded attempts)."""
    stamina.set_testing(True, attempts=3)
    yield
    stamina.set_testing(False)


def _evaluate(item: Any, lane: Lane = Lane.LIVE) -> Delivery:
    return Delivery(EVALUATE_TASK, (item,), {}, lane, raw_bytes(item))


def _handle(rt: Runtime, deliveries: list[Delivery], timeout_s: float = 30.0) -> list[Verdict]:
    with runtime.use(rt):
        return rt.call(Handler(rt).handle(deliveries), timeout_s=timeout_s)


def _handle_synthetic(store: Store, deliveries: list[Delivery]) -> list[Verdict]:
    """Handle ``deliveries`` on a fresh runtime with the synthetic judge (10 s at most)."""
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    try:
        return _handle(rt, deliveries, timeout_s=10.0)
    finally:
        rt.close()


def _snapshots(count: int, prefix: str) -> list[Snapshot]:
    return variants(example_snapshots()["order-42"], count, prefix)


def test_a_micro_batch_is_evaluated_concurrently_up_to_the_bound(store: Store) -> None:
    """Eight live messages, concurrency 4: four judge requests at a time, all acked and recorded."""
    judge = CountingJudge(delay_s=0.3)
    rt = Runtime(load_settings(concurrency=4, processes=1), store=store, judge=judge)
    try:
        started = time.monotonic()
        verdicts = _handle(rt, [_evaluate(s.wire()) for s in _snapshots(8, "live")])
        elapsed_s = time.monotonic() - started
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK] * 8
    assert judge.most_in_flight == 4
    assert 0.6 <= elapsed_s < 3.0  # two waves of 0.3 s, not eight
    assert store.count_evaluations() == 8


def test_thousands_in_flight_need_no_threads(store: Store) -> None:
    """4096 evaluations in flight in one process: all at once on the loop, one thread for them."""
    judge = CountingJudge(delay_s=1.0)
    rt = Runtime(load_settings(concurrency=4096, processes=1), store=store, judge=judge)
    # Every slot open (as at a warm shutdown): this pins the slots' capacity; on a loaded test
    # machine the loop-lag guard (tests/worker/test_loop_lag_limit.py) could rightly hold some.
    rt.stop_adapting()
    try:
        items = [s.wire() for s in _snapshots(4096, "wide")]
        verdicts = _handle(rt, [_evaluate(item, Lane.BACKFILL) for item in items], timeout_s=120)
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK] * 4096
    assert judge.most_in_flight == 4096
    assert store.count_evaluations() == 4096


def test_an_adaptive_runtime_starts_at_its_floor_and_learns_the_judge(store: Store) -> None:
    """Beside live: 40 backfill on 64 slots start 16 at a time, and the limit learns the judge."""
    judge = CountingJudge(delay_s=0.2)
    rt = Runtime(load_settings(concurrency=64, processes=1), store=store, judge=judge)
    try:
        rt.adapt_in_flight()
        limit = rt.in_flight_limit
        assert limit is not None
        assert (limit.floor, limit.current) == (16, 16)
        items = [s.wire() for s in _snapshots(40, "adapt")]
        verdicts = _handle(rt, [_evaluate(item, Lane.BACKFILL) for item in items])
        rt.stop_adapting()
        rt.call(asyncio.sleep(0))  # stop_adapting runs on the loop
        stopped = rt.in_flight_limit
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK] * 40
    assert 16 <= judge.most_in_flight < 40  # without the limit all 40 would be in flight at once
    assert limit.no_load_s == pytest.approx(0.2, abs=0.1)
    assert stopped is None
    assert store.count_evaluations() == 40


def test_records_that_finish_together_share_a_transaction(store: Store) -> None:
    """Group commit: 40 backfill evaluations ending together are written in a few transactions."""
    counting = CountingStore(store)
    rt = Runtime(load_settings(concurrency=64, processes=1), store=counting, judge=SyntheticJudge())  # type: ignore[arg-type]
    try:
        verdicts = _handle(rt, [_evaluate(s.wire(), Lane.BACKFILL) for s in _snapshots(40, "g")])
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK] * 40
    assert sum(counting.groups) == 40
    assert len(counting.groups) < 40  # grouped, not one transaction per record
    assert max(counting.groups) > 1


def test_sends_ride_in_their_evaluations_transaction(store: Store) -> None:
    """Eight live messages: eight sends, and no transaction beyond the evaluations' own."""
    counting = CountingStore(store)
    rt = Runtime(load_settings(processes=1), store=counting, judge=SyntheticJudge())  # type: ignore[arg-type]
    snapshots = _snapshots(8, "ride")
    try:
        first = _handle(rt, [_evaluate(s.wire()) for s in snapshots])
        groups_first = list(counting.groups)
        resent = [  # new messages (their own task ids) of snapshots already evaluated
            dataclasses.replace(_evaluate(s.wire()), message_id=f"resend-{i}")
            for i, s in enumerate(snapshots[:2])
        ]
        again = _handle(rt, resent)
    finally:
        rt.close()
    assert first == [Verdict.ACK] * 8
    assert again == [Verdict.ACK] * 2
    assert sum(groups_first) == 8  # every transaction of the first round held evaluations
    assert all(size > 0 for size in groups_first)
    assert counting.groups[len(groups_first) :] == [0]  # the resends: one sends-only group
    assert sum(len(store.sends(s.snapshot_id)) for s in snapshots) == 10


def test_live_records_go_before_waiting_backfill_records(store: Store) -> None:
    """The committer's next group is the live records, alone, even when backfill ones wait first."""
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    committer = Committer(rt, group_rows=8)
    try:
        with runtime.use(rt):
            taken = rt.call(_take_order(committer))
    finally:
        rt.close()
    assert taken[0] == [True, True]  # the two live records, alone
    assert all(not urgent for group in taken[1:] for urgent in group)


async def _trickle(
    handler: Handler, deliveries: list[Delivery], apart_s: float
) -> list[tuple[str, float]]:
    """Submit one delivery every ``apart_s``; (lane, seconds from the first submit to its
    verdict) for each, in order."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    done: list[asyncio.Future[tuple[str, float]]] = []

    async def timed(future: asyncio.Future[Verdict], lane: str) -> tuple[str, float]:
        await future
        return lane, loop.time() - started

    for delivery in deliveries:
        (verdict,) = handler.submit([delivery])
        lane = delivery.lane.value if delivery.lane else "?"
        done.append(asyncio.ensure_future(timed(verdict, lane)))
        await asyncio.sleep(apart_s)
    return list(await asyncio.gather(*done))


def test_backfill_records_finishing_apart_gather_into_one_transaction(store: Store) -> None:
    """Three backfill messages 50 ms apart: one transaction of three, after the gather wait."""
    # Without the gather wait, each would be written alone as it finished.
    counting = CountingStore(store)
    rt = Runtime(load_settings(processes=1), store=counting, judge=SyntheticJudge())  # type: ignore[arg-type]
    handler = Handler(rt, Committer(rt, gather_s=1.0))
    deliveries = [_evaluate(s.wire(), Lane.BACKFILL) for s in _snapshots(3, "gather")]
    try:
        with runtime.use(rt):
            timings = rt.call(_trickle(handler, deliveries, apart_s=0.05))
    finally:
        rt.close()
    assert counting.groups == [3]
    assert all(at_s >= 1.0 for _, at_s in timings)  # the first waited the whole gather


def test_a_live_record_is_not_held_by_a_gathering_backfill_group(store: Store) -> None:
    """A live record mid-gather is written at once, alone; a full backfill group ends the wait."""
    counting = CountingStore(store)
    rt = Runtime(load_settings(processes=1), store=counting, judge=SyntheticJudge())  # type: ignore[arg-type]
    handler = Handler(rt, Committer(rt, gather_s=20.0))
    snapshots = _snapshots(17, "hold")
    backfill = [_evaluate(s.wire(), Lane.BACKFILL) for s in snapshots[:16]]
    try:
        with runtime.use(rt):
            timings = rt.call(
                _trickle(
                    handler,
                    [backfill[0], _evaluate(snapshots[16].wire()), *backfill[1:]],
                    apart_s=0.01,
                ),
                timeout_s=15,
            )
    finally:
        rt.close()
    assert max(at_s for _, at_s in timings) < 10.0  # nobody waited out the 20 s gather
    assert counting.groups == [1, 16]  # the live record alone, then the full backfill group


async def _take_order(committer: Committer) -> list[list[bool]]:
    """Queue 10 backfill then 2 live pending writes and take the groups in order."""
    from worker.committer import _Pending  # noqa: PLC0415 - the committer's own queue

    loop = asyncio.get_running_loop()
    committer._pending = [
        _Pending(None, None, urgent, loop.create_future()) for urgent in [False] * 10 + [True] * 2
    ]
    groups = []
    while committer._pending:
        groups.append([p.urgent for p in committer._take()])
    return groups


class _Watched(Handler):
    """A handler that notes each message it accepts (``accepted`` events in loop order)."""

    def __init__(self, rt: Runtime, noted: list[str]) -> None:
        super().__init__(rt)
        self.noted = noted

    def _accept(self, message: Any) -> None:
        super()._accept(message)
        self.noted.append("accepted")


class _QueryCounting(CountingStore):
    """A counting store that also counts skip-if-done queries."""

    queries = 0

    def existing_evaluations(self, evaluation_ids: Sequence[str]) -> frozenset[str]:
        self.queries += 1
        return frozenset(self._store.existing_evaluations(evaluation_ids))


def _submit_watched(rt: Runtime, batches: list[list[Any]]) -> tuple[list[str], list[Verdict]]:
    """Submit one backfill message per batch to a watching handler, then close ``rt``: the
    loop's order of accepts, submit's return ("submitted") and a callback queued right after."""
    events: list[str] = []

    async def submit_all() -> list[Verdict]:
        futures = _Watched(rt, events).submit([_evaluate(b, Lane.BACKFILL) for b in batches])
        events.append("submitted")  # the first slice is accepted before submit returns
        asyncio.get_running_loop().call_soon(events.append, "other callback")
        return list(await asyncio.gather(*futures))

    try:
        with runtime.use(rt):
            verdicts = rt.call(submit_all(), timeout_s=30.0)
    finally:
        rt.close()
    return events, verdicts


def test_a_micro_batch_is_accepted_in_slices_and_queried_once(store: Store) -> None:
    """Snapshots are accepted 16 at a time, other callbacks between; skip-if-done is asked once."""
    # Four backfill messages of 8: other ready callbacks run before the next 16, not after all 32.
    counting = _QueryCounting(store)
    rt = Runtime(load_settings(processes=1), store=counting, judge=SyntheticJudge())  # type: ignore[arg-type]
    batches = [[s.wire() for s in _snapshots(8, f"slice{i}")] for i in range(4)]
    events, verdicts = _submit_watched(rt, batches)
    assert handling.ACCEPT_SLICE == 16
    assert events.index("submitted") == 2  # two messages, 16 snapshots, at once
    assert events.index("other callback") == 3  # before the second slice
    assert events.count("accepted") == 4
    assert verdicts == [Verdict.ACK] * 4
    assert counting.queries == 1
    assert store.count_evaluations() == 32


def test_refused_items_count_toward_a_slice(store: Store) -> None:
    """32 refusals are sliced as evaluations are, 16 at once, not four messages in one callback."""
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    batches = [
        [dict(s.wire(), unit="no-such-unit") for s in _snapshots(8, f"bad{i}")] for i in range(4)
    ]
    events, verdicts = _submit_watched(rt, batches)
    assert events.index("submitted") == 2
    assert events.index("other callback") == 3
    assert verdicts == [Verdict.ACK] * 4
    assert len(store.open_dead_letters()) == 32


def test_a_bad_item_does_not_take_its_batch_down(store: Store) -> None:
    """A batch of 3 with one invalid snapshot: two recorded, one SCHEMA_INVALID with its bytes."""
    good = [s.wire() for s in _snapshots(2, "ok")]
    bad = dict(good[0], unit="no-such-unit")
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    try:
        (verdict,) = _handle(rt, [_evaluate([good[0], bad, good[1]], Lane.BACKFILL)])
    finally:
        rt.close()
    assert verdict is Verdict.ACK
    assert store.count_evaluations() == 2
    (dead,) = store.open_dead_letters()
    assert dead.reason == "SCHEMA_INVALID"
    assert b"no-such-unit" in dead.payload


def test_a_bug_while_accepting_dead_letters_that_message_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug accepting one message dead-letters it alone (INTERNAL_ERROR); the rest is evaluated."""
    good = [s.wire() for s in _snapshots(2, "bug-ok")]
    bad = _snapshots(1, "bug-bad")[0].wire()
    items = handling._items

    def buggy(payload: Any) -> list[Any]:
        if payload == bad:
            raise RuntimeError("a bug")
        return items(payload)

    monkeypatch.setattr(handling, "_items", buggy)
    deliveries = [_evaluate(good[0]), _evaluate(bad), _evaluate(good[1])]
    assert _handle_synthetic(store, deliveries) == [Verdict.ACK] * 3
    assert store.count_evaluations() == 2
    (dead,) = store.open_dead_letters()
    assert (dead.reason, dead.payload) == ("INTERNAL_ERROR", deliveries[1].raw)


def test_a_bug_after_accepting_dead_letters_every_unsettled_message(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in skip-if-done: every message of the micro-batch is an INTERNAL_ERROR dead letter."""
    deliveries = [_evaluate(s.wire()) for s in _snapshots(3, "bug-after")]

    async def broken(self: Handler, evaluation_ids: list[str]) -> frozenset[str]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Handler, "_existing", broken)
    assert _handle_synthetic(store, deliveries) == [Verdict.ACK] * 3
    assert store.count_evaluations() == 0
    dead = sorted((d.reason, d.payload) for d in store.open_dead_letters())
    assert dead == sorted(("INTERNAL_ERROR", d.raw) for d in deliveries)


def test_deep_nesting_is_one_dead_letter_not_a_crash(store: Store) -> None:
    """An item nested 400 deep: SCHEMA_INVALID for it alone, its sibling recorded."""
    deep: Any = "x"
    for _ in range(400):
        deep = [deep]
    good = _snapshots(1, "deep")[0].wire()
    bad = dict(good, metadata={"deep": deep})
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    try:
        (verdict,) = _handle(rt, [_evaluate([bad, good], Lane.BACKFILL)])
    finally:
        rt.close()
    assert verdict is Verdict.ACK
    assert store.count_evaluations() == 1
    assert [d.reason for d in store.open_dead_letters()] == ["SCHEMA_INVALID"]


def test_unknown_tasks_and_refusals_become_dead_letters(store: Store) -> None:
    """Celery's built-in task names are refused like any unknown one; refusals keep raw bytes."""
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    accumulate = Delivery("celery.accumulate", (1, 2), {}, Lane.LIVE, b"[[1,2],{},{}]")
    try:
        verdicts = _handle(
            rt,
            [accumulate, Delivery.refusal(DeadLetterCode.UNDECODABLE, b"not json", lane=Lane.LIVE)],
        )
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK, Verdict.ACK]
    reasons = sorted((d.reason, d.payload) for d in store.open_dead_letters())
    assert reasons == [("UNDECODABLE", b"not json"), ("UNKNOWN_TASK", b"[[1,2],{},{}]")]


def test_an_already_evaluated_snapshot_writes_nothing(store: Store) -> None:
    """Skip-if-done: the second delivery of a snapshot is acked without a judge request."""
    judge = CountingJudge(delay_s=0.0)
    rt = Runtime(load_settings(processes=1), store=store, judge=judge)
    item = _snapshots(1, "dup")[0].wire()
    try:
        first = _handle(rt, [_evaluate(item)])
        calls = judge.calls
        second = _handle(rt, [_evaluate(item), _evaluate(item)])
    finally:
        rt.close()
    assert first == [Verdict.ACK]
    assert second == [Verdict.ACK, Verdict.ACK]
    assert judge.calls == calls  # nothing was judged again
    assert store.count_evaluations() == 1


def test_the_backstop_keeps_requests_sent_and_records_timeouts(store: Store) -> None:
    """A judge that ignores cancellation: recorded at budget + margin, requests=1, asked TIMEOUT."""
    judge = DeafJudge()
    settings = load_settings(budget_s=0.2, processes=1)
    rt = Runtime(settings, store=store, judge=judge)
    snapshot = _snapshots(1, "deaf")[0]
    try:
        started = time.monotonic()
        (verdict,) = _handle(rt, [_evaluate(snapshot.wire())])
        waited_s = time.monotonic() - started
    finally:
        rt.close()
    assert verdict is Verdict.ACK
    assert waited_s < settings.budget_s + 2.0 + 1.0  # the backstop margin, not forever
    (row,) = list(store.iter_evaluation_rows())[:1]
    stored = store.find_evaluation(snapshot.snapshot_id, row.metric_set_version)
    assert stored is not None
    assert stored.record.requests == judge.calls == 1
    assert [(u.model, u.usage) for u in stored.record.usage] == [(None, None)]
    reasons = {r.metric_id: r.reason for r in stored.record.results}
    # settled before the judge was asked: the deterministic result is kept, the rest timed out
    assert reasons.pop("tool_execution") == "ALL_OK"
    assert set(reasons.values()) == {"TIMEOUT"}


def _submitted(rt: Runtime, deliveries: list[Delivery]) -> list[asyncio.Future[Verdict]]:
    """Start handling ``deliveries`` on ``rt``'s loop; the verdict futures, not awaited."""

    async def submit() -> list[asyncio.Future[Verdict]]:
        return Handler(rt).submit(deliveries)

    return rt.call(submit(), timeout_s=10.0)


async def _all(pending: list[asyncio.Future[Verdict]]) -> list[Verdict]:
    return list(await asyncio.gather(*pending))


def test_a_warm_shutdown_requeues_what_has_not_started_and_redelivery_skips_the_rest(
    store: Store,
) -> None:
    """Warm shutdown: the started two recorded, both REQUEUE; redelivery judges the rest."""
    # Two slots, a batch of five and a live message: stop_starting while two are judged.
    batch = _evaluate([s.wire() for s in _snapshots(5, "drain-bf")], Lane.BACKFILL)
    live = _evaluate(_snapshots(1, "drain-live")[0].wire())
    first = CountingJudge(delay_s=0.5)
    rt = Runtime(load_settings(concurrency=2, processes=1), store=store, judge=first)
    try:
        with runtime.use(rt):
            pending = _submitted(rt, [batch, live])
            deadline = time.monotonic() + 10
            while first.in_flight < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            rt.stop_starting()
            verdicts = rt.call(_all(pending), timeout_s=10.0)
    finally:
        rt.close()
    assert verdicts == [Verdict.REQUEUE, Verdict.REQUEUE]
    assert store.count_evaluations() == 2  # the two that had started, recorded
    again = CountingJudge(delay_s=0.0)
    rt = Runtime(load_settings(concurrency=2, processes=1), store=store, judge=again)
    try:
        assert _handle(rt, [batch, live]) == [Verdict.ACK, Verdict.ACK]
    finally:
        rt.close()
    assert store.count_evaluations() == 6
    assert first.calls > 0
    assert again.calls == 2 * first.calls  # four evaluations where the first run judged two


class FlakyStore(CountingStore):
    """A real store whose first ``failures`` group writes raise a transient error."""

    def __init__(self, store: Store, failures: int) -> None:
        super().__init__(store)
        self.failures = failures

    def record_evaluations(
        self, items: Sequence[EvaluationItem], urgent: bool = False, sends: Sequence[Any] = ()
    ) -> list[Written]:
        if self.failures:
            self.failures -= 1
            raise TransientStoreError("STORE_UNAVAILABLE")
        return super().record_evaluations(items, urgent, sends)


def test_a_transient_store_failure_is_held_and_retried_never_acked_unwritten(store: Store) -> None:
    """Two failed commits, then success: the message is acked only once its record is written."""
    flaky = FlakyStore(store, failures=2)
    rt = Runtime(load_settings(processes=1), store=flaky, judge=SyntheticJudge())  # type: ignore[arg-type]
    try:
        (verdict,) = _handle(rt, [_evaluate(_snapshots(1, "flaky")[0].wire())])
    finally:
        rt.close()
    assert verdict is Verdict.ACK
    assert flaky.failures == 0
    assert store.count_evaluations() == 1


def test_a_store_that_stays_down_requeues(store: Store) -> None:
    """The store failing past the retries: REQUEUE, nothing acked, nothing recorded."""
    flaky = FlakyStore(store, failures=100)
    rt = Runtime(load_settings(processes=1), store=flaky, judge=SyntheticJudge())  # type: ignore[arg-type]
    try:
        (verdict,) = _handle(rt, [_evaluate(_snapshots(1, "down")[0].wire())])
    finally:
        rt.close()
    assert verdict is Verdict.REQUEUE
    assert store.count_evaluations() == 0


class RefusingStore(CountingStore):
    """A real store that refuses, for good, every write holding one snapshot's evaluation
    (``error``); the dead letters it may refuse too (``refuse_dead_letters``)."""

    def __init__(self, store: Store, snapshot_id: str, error: Exception) -> None:
        super().__init__(store)
        self.snapshot_id, self.error = snapshot_id, error
        self.refuse_dead_letters: Exception | None = None

    def record_evaluations(
        self, items: Sequence[EvaluationItem], urgent: bool = False, sends: Sequence[Any] = ()
    ) -> list[Written]:
        if any(record.snapshot_id == self.snapshot_id for record, _ in items):
            raise self.error
        return super().record_evaluations(items, urgent, sends)

    def record_evaluation(self, record: EvaluationRecord, snapshot: Any = None) -> Written:
        if record.snapshot_id == self.snapshot_id:
            raise self.error
        return self._store.record_evaluation(record, snapshot)

    def record_dead_letter(self, *args: Any, **kwargs: Any) -> Any:
        if self.refuse_dead_letters:
            raise self.refuse_dead_letters
        return self._store.record_dead_letter(*args, **kwargs)

    def record_outcome(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    def record_tally(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


_OUTCOME = {
    "schema_version": 1,
    "event_id": "e-1",
    "trace_id": "order-42",
    "name": "refund",
    "value": True,
    "observed_at": "2026-11-01T00:00:00Z",
}


@dataclasses.dataclass(frozen=True)
class Refused:
    """What one micro-batch with a refused record left behind."""

    verdicts: list[Verdict]
    snapshot: Snapshot
    judge: CountingJudge
    halted: str | None


def _refused_alone(
    store: Store, error: Exception, *, refuse_dead_letters: Exception | None = None
) -> Refused:
    """Two live snapshots in one micro-batch, the first of which the store refuses for good."""
    refused, kept = _snapshots(2, "refused")
    refusing = RefusingStore(store, refused.snapshot_id, error)
    refusing.refuse_dead_letters = refuse_dead_letters
    judge = CountingJudge(delay_s=0.0)
    rt = Runtime(load_settings(processes=1), store=refusing, judge=judge)  # type: ignore[arg-type]
    try:
        verdicts = _handle(rt, [_evaluate(refused.wire()), _evaluate(kept.wire())])
    finally:
        rt.close()
    return Refused(verdicts, refused, judge, rt.halt.reason)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PermanentStoreError("STORE_PERMISSION_DENIED"), DeadLetterCode.RECORD_REFUSED),
        (RuntimeError("a bug in the writer"), DeadLetterCode.INTERNAL_ERROR),
    ],
    ids=["refused", "bug"],
)
def test_a_record_the_store_will_never_take_is_a_dead_letter_not_a_loop(
    store: Store, error: Exception, code: DeadLetterCode
) -> None:
    """A record refused for good (or a bug) is an acked dead letter; the rest of its group kept."""
    # Requeued instead, it would be judged and refused again for ever.
    refused = _refused_alone(store, error)
    assert refused.verdicts == [Verdict.ACK, Verdict.ACK]
    assert store.count_evaluations() == 1
    (letter,) = store.open_dead_letters()
    assert letter.reason == code
    assert letter.payload == canonical_json(refused.snapshot.wire()).encode("utf-8")
    assert refused.judge.calls > 0
    assert refused.halted is None


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PermanentStoreError("STORE_PERMISSION_DENIED"), "STORE_PERMISSION_DENIED"),
        (RuntimeError("a bug in the dead-letter writer"), "INTERNAL_ERROR"),
    ],
    ids=["refused", "bug"],
)
def test_a_dead_letter_refused_for_good_halts_instead_of_looping(
    store: Store, error: Exception, code: str
) -> None:
    """A dead letter refused for good (or a bug) halts with its code; the message is requeued."""
    refused = _refused_alone(store, PermanentStoreError("STORE_FAILED"), refuse_dead_letters=error)
    assert refused.verdicts == [Verdict.REQUEUE, Verdict.ACK]
    assert refused.halted == code
    assert store.open_dead_letters() == ()
    assert store.count_evaluations() == 1


def test_an_invalid_snapshot_whose_dead_letter_is_refused_halts(store: Store) -> None:
    """A decode refusal whose dead letter is refused for good halts; the message is requeued."""
    refusing = RefusingStore(store, "", PermanentStoreError("STORE_FAILED"))
    refusing.refuse_dead_letters = PermanentStoreError("STORE_PERMISSION_DENIED")
    rt = Runtime(load_settings(processes=1), store=refusing, judge=SyntheticJudge())  # type: ignore[arg-type]
    try:
        (verdict,) = _handle(rt, [_evaluate({"schema_version": 1, "nope": True})])
    finally:
        rt.close()
    assert verdict is Verdict.REQUEUE
    assert rt.halt.reason == "STORE_PERMISSION_DENIED"


def _tally(tally_id: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "tally_id": tally_id,
        "producer": "test",
        "started_at": "2026-11-01T00:00:00Z",
        "ended_at": "2026-11-01T00:01:00Z",
        "rows": [],
    }


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PermanentStoreError("STORE_PERMISSION_DENIED"), DeadLetterCode.RECORD_REFUSED),
        (RuntimeError("a bug in the writer"), DeadLetterCode.INTERNAL_ERROR),
    ],
    ids=["refused", "bug"],
)
@pytest.mark.parametrize("task", [OUTCOME_TASK, TALLY_TASK])
def test_an_outcome_or_tally_the_store_refuses_is_kept_not_looped(
    store: Store, task: str, error: Exception, code: DeadLetterCode
) -> None:
    """A refused outcome or tally is a dead letter of its raw bytes, acked and redrivable."""
    item = _OUTCOME if task == OUTCOME_TASK else _tally("t-refused")
    refusing = RefusingStore(store, "", error)
    rt = Runtime(load_settings(processes=1), store=refusing, judge=SyntheticJudge())  # type: ignore[arg-type]
    try:
        (verdict,) = _handle(rt, [Delivery(task, (item,), {}, Lane.OUTCOMES, raw_bytes(item))])
    finally:
        rt.close()
    assert verdict is Verdict.ACK
    (letter,) = store.open_dead_letters()
    assert (letter.reason, letter.task, letter.payload) == (code, task, raw_bytes(item))
    assert rt.halt.reason is None
    resent = Resent()
    assert redrive(store, resent).redriven == 1
    assert resent.items == [item]


class DeadLetterAttempts(CountingStore):
    """A real store that notes every dead letter asked of it and refuses them (``refuse``)."""

    def __init__(self, store: Store, refuse: Exception | None) -> None:
        super().__init__(store)
        self.refuse, self.codes = refuse, list[str]()

    def record_dead_letter(self, record: DeadLetterRecord) -> str:
        self.codes.append(record.reason)
        if self.refuse is not None:
            raise self.refuse
        return self._store.record_dead_letter(record)


def _outcome(event: dict[str, Any]) -> Delivery:
    return Delivery(OUTCOME_TASK, (event,), {}, Lane.OUTCOMES, raw_bytes(event))


def _conflicting(store: Store, refuse: Exception | None) -> tuple[Verdict, Runtime, list[str]]:
    """An outcome recorded, then the same event id with another value."""
    attempts = DeadLetterAttempts(store, refuse)
    rt = Runtime(load_settings(processes=1), store=attempts, judge=SyntheticJudge())  # type: ignore[arg-type]
    try:
        assert _handle(rt, [_outcome(_OUTCOME)]) == [Verdict.ACK]
        (verdict,) = _handle(rt, [_outcome({**_OUTCOME, "value": False})])
    finally:
        rt.close()
    return verdict, rt, attempts.codes


def test_a_conflicting_outcome_is_kept_as_its_own_dead_letter(store: Store) -> None:
    """A stored event id with other content: one OUTCOME_CONFLICT dead letter, acked."""
    verdict, rt, codes = _conflicting(store, refuse=None)
    assert verdict is Verdict.ACK
    assert codes == ["OUTCOME_CONFLICT"]
    (letter,) = store.open_dead_letters()
    assert letter.reason == "OUTCOME_CONFLICT"
    assert rt.halt.reason is None


def test_a_conflict_whose_dead_letter_is_refused_halts_through_the_one_writer(
    store: Store,
) -> None:
    """The conflict's dead letter refused for good halts at once: no RECORD_REFUSED tried."""
    refusal = PermanentStoreError("STORE_PERMISSION_DENIED")
    verdict, rt, codes = _conflicting(store, refuse=refusal)
    assert verdict is Verdict.REQUEUE
    assert codes == ["OUTCOME_CONFLICT"]
    assert rt.halt.reason == "STORE_PERMISSION_DENIED"


class Resent:
    """A redrive's publisher that keeps what it was given (its set fields) instead of sending."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def send_many(self, snapshots: Any, *, lane: Any = None, batch_size: int = 1) -> int:
        self.items += [_set_fields(s) for s in snapshots]
        return len(self.items)

    def outcome(self, event: Any) -> object:
        self.items.append(_set_fields(event))
        return event

    def send_tally(self, tally: Any) -> object:
        self.items.append(_set_fields(tally))
        return tally


def _set_fields(model: Any) -> dict[str, Any]:
    return {key: value for key, value in model.wire().items() if value is not None}


def test_outcomes_are_recorded_through_the_same_path(store: Store) -> None:
    """An outcome message: recorded and acked; a malformed one: a SCHEMA_INVALID dead letter."""
    event = _OUTCOME
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    try:
        verdicts = _handle(
            rt,
            [
                Delivery(OUTCOME_TASK, (event,), {}, Lane.OUTCOMES, raw_bytes(event)),
                Delivery(OUTCOME_TASK, ({"nope": 1},), {}, Lane.OUTCOMES, b"{}"),
            ],
        )
    finally:
        rt.close()
    assert verdicts == [Verdict.ACK, Verdict.ACK]
    assert [d.reason for d in store.open_dead_letters()] == ["SCHEMA_INVALID"]
