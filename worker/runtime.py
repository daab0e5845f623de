"""Per-process runtime: one event loop, one judge, one store, the evaluation slots.

Why this shape (docs/concurrency.md has the measurements):

- **Evaluations are coroutines on one loop per process.** The judges are async (an aiohttp
  client keeps thousands of requests in flight on one connection pool) and the engine enforces
  its budget by *cancelling* the in-flight request (``asyncio.timeout``), which only works on a
  loop. The whole message path (:mod:`worker.handling`) runs on this loop, in a thread of its
  own beside Celery's consumer; blocking store calls go to a small, fixed set of store threads.
  Concurrency is a number of slots, not of threads: thousands of evaluations in flight cost
  memory for their coroutines only.
- **Built after fork, never at import.** Loops, sockets and connection pools do not survive
  ``fork()``. :func:`current` builds the runtime lazily and rebuilds it when the PID changed; the
  worker's lifecycle bootstep (:mod:`worker.lifecycle`) builds it eagerly at start, so a broken
  store or judge configuration shows at once.
- **One shared judge.** HTTP judges own one pooled client: building a client costs 25-40 ms of CPU.
- **Evaluation slots** (:class:`~worker.slots.Slots`, the process's share of the concurrency)
  bound evaluations (hence judge requests: one per evaluation at a time) in flight; a freed slot
  goes to a waiting live snapshot first. A snapshot's budget starts when it gets a slot, so
  waiting behind other work never eats its budget. Beside a live lane, the other lanes' slots
  also follow the judge's round trip (:meth:`Runtime.adapt_in_flight`), and every runtime's
  slots follow the loop's own lag (:mod:`worker.loop_lag_limit`): a CPU-bound process holds
  back messages instead of letting its backlog eat their budgets.
- **The backstop.** The engine returns a report with TIMEOUT results at its deadline. Should it
  not (a judge that ignores cancellation, a blocked loop), the runtime cancels it at
  ``budget + BACKSTOP_MARGIN_S`` and records what the engine had by then: completed results, the
  requests sent and their usage (unknown where no response came), TIMEOUT for the rest.
- **A warm shutdown starts nothing new** (:meth:`Runtime.stop_starting`): the evaluations
  running finish, and a message with an evaluation still waiting for a slot goes back to the
  broker (skip-if-done makes its redelivery evaluate only what was not recorded).
- **A testing switch.** :func:`use` installs a runtime built by a test (an injected store and
  judge) as this process's runtime, so message handling is tested in-process, without a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from worker import metrics
from worker.evaluation import Evaluator, Progress, Reason, Report, Trace
from worker.halt import EXIT_CRASHED, Halt
from worker.in_flight_limit import InFlightLimit
from worker.judges import ChatJudge, Judge, SyntheticJudge, SystemOneJudge
from worker.loop_lag_limit import SAMPLE_S, LoopLagLimit
from worker.metric_sets import MetricSet, build_metric_set
from worker.settings import BACKSTOP_MARGIN_S, JudgeKind, Settings
from worker.slots import Slots
from worker.store import Store, open_store

__all__ = [
    "BESIDE_LIVE_ENV",
    "GC_GEN0_THRESHOLD",
    "STORE_CALL_RETRY_S",
    "STORE_THREADS",
    "SWITCH_INTERVAL_S",
    "FinishedEvaluation",
    "Runtime",
    "configured_metric_set",
    "current",
    "install",
    "judge_identity",
    "lower_priority",
    "open_worker_store",
    "shutdown",
    "tune_gc",
    "use",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
STORE_THREADS = 2
"""Threads for blocking store calls: the group-commit writer and one for reads and dead letters."""
STORE_CALL_RETRY_S = 2.0
"""How long the worker's store retries a transient fault inside one call (the store's default is
30 s); longer trouble is held by the committer (``EVALQ_STORE_HOLD_S``)."""
SWITCH_INTERVAL_S = 0.00025
"""GIL hand-over interval of a worker process (CPython's default is 5 ms).

The consumer thread, the loop thread and the store threads hand the GIL to each other on every
blocking call; at 5 ms a store statement or an ack waited up to that long whenever the loop was
busy (docs/concurrency.md measured 0.25 ms as the best of 0.1-5 ms)."""
GC_GEN0_THRESHOLD = 400_000
"""Cycle-collector threshold of a worker process (see :func:`tune_gc`)."""
BESIDE_LIVE_ENV = "EVALQ_BESIDE_LIVE"
"""Set to ``1`` by the supervisor for each child serving the other lanes of a worker that serves
live too: its runtime yields to the live lane (see :class:`Runtime`)."""


def judge_identity(settings: Settings) -> str:
    """The judge's name in metric-set versions and records: ``synthetic``, ``systemone:<model>``…"""
    if settings.judge is JudgeKind.SYNTHETIC:
        return "synthetic"
    if settings.judge is JudgeKind.SYSTEMONE:
        return f"systemone:{settings.judge_model or SystemOneJudge.DEFAULT_MODEL}"
    return f"chat:{settings.judge_model}"


def configured_metric_set(settings: Settings, name: str) -> MetricSet:
    """Metric set ``name`` as ``settings`` resolve it: metrics, thresholds, judge, version.

    The one place a worker and ``evalq run`` derive the metric-set version results carry.
    """
    return build_metric_set(
        name,
        thresholds=settings.effective_thresholds,
        judge=judge_identity(settings),
        limits=settings.limits,
        metrics=settings.metrics,
        config_version=settings.version,
    )


def _build_judge(settings: Settings) -> Judge:
    """The configured judge; keys come from this process's environment via ``Settings``.

    Every HTTP response it receives (retried attempts too) is counted by status class.
    """
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    if settings.judge is JudgeKind.SYNTHETIC:
        return SyntheticJudge()
    counted = metrics.default_metrics().observe_http_status
    if settings.judge is JudgeKind.SYSTEMONE:
        return SystemOneJudge(
            base_url=settings.judge_url or SystemOneJudge.DEFAULT_BASE_URL,
            api_key=key,
            model=settings.judge_model or SystemOneJudge.DEFAULT_MODEL,
            on_response=counted,
        )
    assert settings.judge_url is not None  # Settings requires both for the chat judge
    assert settings.judge_model is not None
    return ChatJudge.openai_compatible(
        settings.judge_url, settings.judge_model, api_key=key, on_response=counted
    )


def open_worker_store(settings: Settings) -> Store:
    """The store of one worker process; its pool is sized for the store threads that use it.

    Its retries inside one call end after :data:`STORE_CALL_RETRY_S`: enough for the blips they
    are for (a serialization failure, a deadlock: five attempts, 50 ms apart at first, take ~1 s),
    while an outage is the committer's to hold, with back-off, for ``EVALQ_STORE_HOLD_S``
    (:mod:`worker.committer`). With the store's default 30 s inside every attempt the two stacked:
    PostgreSQL cut off under a 2 s hold halted a worker 30 s after the cut, and an attempt
    begun late in the hold could outlast it by 30 s.
    """
    return open_store(
        settings.store_url,
        pool_max_size=STORE_THREADS + 2,
        retry_timeout_s=min(STORE_CALL_RETRY_S, settings.store_hold_s),
    )


def tune_gc(gen0_threshold: int) -> None:
    """Collect cycles every ``gen0_threshold`` allocations instead of CPython's 700.

    A snapshot allocates thousands of short-lived containers (frozen JSON, models), freed by
    reference counting; at 700 the cycle collector ran ~0.6 collections per snapshot and took ~0.6
    ms of its ~3 ms of CPU (measured with ``gc.callbacks``). At 50,000 it took 0.04 ms; the cyclic
    garbage waiting for a collection is bounded by the threshold. With thousands of evaluations in
    flight their live objects are scanned again by every middle-generation collection (0.8-1 s of a
    process's drain at 2,048 in flight against 0.06 s at 256, on a slow machine); 400,000 instead of
    50,000 read 2-8% less CPU per snapshot in every CPU-bound A/B pair at 2,048 in flight and on the
    backfill lane, the same at 64-256, the same peak RSS in those drains; a 100k-snapshot backfill
    ends ~10 MiB larger (P5 1.05 against 1.02; docs/concurrency.md, fourteenth round). Older
    generations keep CPython's ratios. What start-up built (modules, schemas, metric sets) is frozen
    out of every later collection: it lives as long as the process. Called once per worker process,
    after its runtime is built (never from library code: freezing is process-wide).
    """
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    gc.freeze()


def lower_priority(nice: int, *, idle: bool = False, keep: Collection[int] = ()) -> None:
    """Run this process (every thread, on Linux) at CPU niceness ``nice`` (0 = unchanged).

    For a backfill pool sharing machines with a live pool (``EVALQ_NICE=10``): the kernel then
    gives a runnable live worker the CPU first (``bench/live_latency.py`` runs its backfill pool
    so). Threads started later inherit it from their creator.

    ``idle`` also moves every thread but ``keep`` (native thread ids) to Linux's ``SCHED_IDLE``
    class: such a thread runs only when nothing else of the machine wants the CPU, and a woken
    thread of any other class preempts it at once (at nice 10 the woken live worker, Redis or
    judge may still wait for the rest of its slice). Where the class is missing, nice alone
    applies.
    """
    policy = getattr(os, "SCHED_IDLE", None) if idle else None
    if nice <= 0 and policy is None:
        return
    tasks = Path("/proc/self/task")
    ids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in ids:
        with contextlib.suppress(OSError):  # a thread that just ended
            if nice > 0:
                current = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, max(nice, current))
            if policy is not None and tid not in keep:
                os.sched_setscheduler(tid, policy, os.sched_param(0))


def _start_threads(pool: ThreadPoolExecutor, count: int) -> tuple[int, ...]:
    """Start ``count`` threads of ``pool`` now (it starts them lazily); their native ids."""
    started = threading.Barrier(count + 1)

    def native_id() -> int:
        started.wait(10.0)  # every task on a thread of its own
        return threading.get_native_id()

    futures = [pool.submit(native_id) for _ in range(count)]
    started.wait(10.0)
    return tuple(future.result() for future in futures)


@dataclass(frozen=True)
class FinishedEvaluation:
    """One finished evaluation: the report, when it started, and whether the backstop ended it.

    (Not an outcome event: those are :class:`producer.snapshot.OutcomeEvent`.)

    ``started_s`` is ``time.monotonic()`` when the evaluation got its slot (its budget's start).
    ``overloaded``: the process's event loop was lagging when it ended
    (:attr:`~worker.loop_lag_limit.LoopLagLimit.lagging`), so a TIMEOUT in it is likely the
    worker's own CPU overload rather than the judge's.
    """

    report: Report
    started_at: datetime
    started_s: float
    backstop: bool
    overloaded: bool = False


class Runtime:
    """Loop thread + judge + store + evaluation slots of one worker process (see the module)."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        judge: Judge | None = None,
        halt: Halt | None = None,
    ) -> None:
        """Start the loop thread, then build the judge on it and open the store.

        ``store`` and ``judge`` replace the configured ones (tests, embedding); an injected store
        stays open on :meth:`close` (its owner closes it). ``halt`` is shared by the runtimes of
        one process (:mod:`worker.halt`); by default the runtime has its own.
        """
        self.settings = settings
        self.pid = os.getpid()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        beside_live = os.environ.get(BESIDE_LIVE_ENV) == "1"
        self.store_threads = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="evalq-store")
        # Store threads keep the normal class: one holding SQLite's write turn must not be
        # starved while a live writer waits for it.
        keep = _start_threads(self.store_threads, STORE_THREADS) if beside_live else ()
        lower_priority(settings.nice, idle=beside_live, keep=keep)  # the loop inherits it
        self.limits = settings.limits
        self.judge_name = judge_identity(settings)
        self._metric_sets: dict[str, tuple[MetricSet, Evaluator]] = {}
        self._abandoned: set[asyncio.Future[Report]] = set()
        self._lock = threading.Lock()
        self.halt = halt or Halt()
        self._closing = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="evalq-loop", daemon=True)
        self._thread.start()
        raw = judge if judge is not None else self.call(self._make_judge())
        model = getattr(raw, "model", None)
        self.judge_model: str | None = model if isinstance(model, str) else None
        # status + latency of every request; valid answers' round trips feed the in-flight limit
        self.judge: Judge = metrics.MeteredJudge(raw, on_answer=self._judge_answered)
        slots = settings.process_concurrency
        self._slots = Slots(slots, guard=LoopLagLimit(slots))
        self._lag_watch = self.call(self._start_watching())
        if beside_live:
            self.adapt_in_flight()
        self._owns_store = store is None
        self.store: Store = store if store is not None else open_worker_store(settings)
        # Built now, not by the first message: building a set takes a noticeable fraction of a
        # second (measured: +150 ms on the first live evaluations after a start).
        self.metric_set(settings.metric_set)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # A loop that ends before close() (SystemExit or MemoryError out of a callback)
            # would leave every message held and never settled: stop the process instead.
            if not self._closing:
                why = "the event loop ended unexpectedly"
                self.halt.stop("RUNTIME_STOPPED", why, exit_status=EXIT_CRASHED)

    async def _make_judge(self) -> Judge:
        # Built on the loop: HTTP clients bind to the loop that first uses them.
        return _build_judge(self.settings)

    def call(self, coro: Coroutine[Any, Any, _T], timeout_s: float = 30.0) -> _T:
        """Run ``coro`` on the loop from another thread and wait for it (setup, tests)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def in_store_thread(self, work: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking store call on a store thread, from the loop."""
        return await self.loop.run_in_executor(self.store_threads, work, *args)

    # -- metric sets ----------------------------------------------------------------------------

    def metric_set(self, name: str) -> tuple[MetricSet, Evaluator]:
        """The resolved set and its evaluator (built once per name; ``UnknownMetricSet``)."""
        with self._lock:
            found = self._metric_sets.get(name)
            if found is None:
                resolved = configured_metric_set(self.settings, name)
                found = (resolved, Evaluator(self.judge, resolved.metrics, self.limits))
                metrics.allow_metric_ids(resolved.metric_ids)
                self._metric_sets[name] = found
            return found

    # -- evaluation ----------------------------------------------------------------------------

    def adapt_in_flight(self) -> None:
        """Bound evaluations in flight by the judge's round trip from now on (the non-live
        lanes beside a live lane: :mod:`worker.in_flight_limit`)."""
        self._slots.limit = InFlightLimit(self._slots.count)

    def stop_adapting(self) -> None:
        """Open every slot, whatever the judge's round trip or the loop's lag (the testing
        switch that pins the slots' capacity). Safe from any thread."""
        self.loop.call_soon_threadsafe(self._open_all_slots)

    def _open_all_slots(self) -> None:
        self._slots.limit = self._slots.guard = None
        self._slots.wake()

    def stop_starting(self) -> None:
        """Start no more evaluations (warm shutdown). Safe from any thread.

        Those running finish within their budget; those waiting for a slot, and any asked for
        later, end with :class:`~worker.slots.SlotsClosedError` before they start, so their
        messages go back to the broker instead of holding the shutdown for their turn
        (``Settings.shutdown_drain_s``).
        """
        self.loop.call_soon_threadsafe(self._close_slots)

    def _close_slots(self) -> None:
        self._slots.limit = self._slots.guard = None  # the lag watch ends with its guard
        self._slots.close()

    async def _start_watching(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._watch_loop_lag())

    async def _stop_watching(self) -> None:
        self._lag_watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._lag_watch

    async def _watch_loop_lag(self) -> None:
        """Feed the loop's lag to the slots' guard until a warm shutdown opens every slot."""
        while (guard := self._slots.guard) is not None:
            asleep = self.loop.time()
            await asyncio.sleep(SAMPLE_S)
            before = guard.current
            lag_s = self.loop.time() - asleep - SAMPLE_S
            guard.observe(lag_s, self._slots.in_use)
            metrics.observe_loop_lag(lag_s)
            if guard.current > before:  # only a grown limit has slots to hand out
                self._slots.wake()

    @property
    def loop_lag_limit(self) -> LoopLagLimit | None:
        """The limit by the loop's lag (None after a warm shutdown opened every slot)."""
        return self._slots.guard

    @property
    def in_flight_limit(self) -> InFlightLimit | None:
        """The adaptive limit, when :meth:`adapt_in_flight` turned it on."""
        return self._slots.limit

    def _judge_answered(self, round_trip_s: float) -> None:
        limit = self._slots.limit
        if limit is not None:
            before = limit.current
            limit.observe(round_trip_s, self._slots.in_use)
            if limit.current > before:  # only a grown limit has slots to hand out
                self._slots.wake()

    async def evaluate(
        self, trace: Trace, name: str, *, urgent: bool = False
    ) -> FinishedEvaluation:
        """Evaluate ``trace`` with metric set ``name`` once a slot is free (on the loop).

        ``urgent`` (a live snapshot) takes the next free slot before waiting backfill ones.
        After :meth:`stop_starting`: :class:`~worker.slots.SlotsClosedError`, nothing started.
        """
        _, evaluator = self.metric_set(name)
        async with self._slots.held(urgent=urgent):
            started_at = datetime.now(UTC)
            started = time.monotonic()
            progress = Progress()
            # Shielded: a judge that ignores cancellation must not hold the backstop too.
            task = asyncio.ensure_future(evaluator.evaluate(trace, progress=progress))
            try:
                async with asyncio.timeout(self.settings.budget_s + BACKSTOP_MARGIN_S):
                    report = await asyncio.shield(task)
            except TimeoutError:
                self._abandon(task)
                _log.warning("evaluation backstop: %s", Reason.TIMEOUT)
                elapsed_s = time.monotonic() - started
                report = evaluator.interrupted_report(trace, progress, elapsed_s)
                return FinishedEvaluation(
                    report, started_at, started, backstop=True, overloaded=self._lagging()
                )
            except asyncio.CancelledError:
                task.cancel()
                raise
            return FinishedEvaluation(
                report, started_at, started, backstop=False, overloaded=self._lagging()
            )

    def _lagging(self) -> bool:
        guard = self._slots.guard
        return guard is not None and guard.lagging

    def _abandon(self, task: asyncio.Future[Report]) -> None:
        """Cancel a runaway evaluation and keep a reference until it really ends."""
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)

    # -- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the judge's client and the store, and stop the loop."""
        self._closing = True
        if self._thread.is_alive():  # a loop blocked past 5 s must not stop the shutdown
            with contextlib.suppress(TimeoutError):
                self.call(self._stop_watching(), timeout_s=5.0)
        aclose = getattr(self.judge, "aclose", None)
        if aclose is not None and self._thread.is_alive():  # a dead loop cannot run it
            try:
                self.call(aclose(), timeout_s=5.0)
            except Exception as exc:  # noqa: BLE001 - shutdown must go on
                _log.warning("judge close failed: %s", type(exc).__name__)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        # After a halt a store call may still be retrying the outage (up to the store's retry
        # timeout): closing the store under it ends it instead of waiting it out.
        halted = self.halt.reason is not None
        self.store_threads.shutdown(wait=not halted, cancel_futures=True)
        if self._owns_store:
            self.store.close()


_settings: Settings | None = None
_runtime: Runtime | None = None
_guard = threading.Lock()


def install(settings: Settings) -> None:
    """Remember the settings this process's runtime is built from (the app factory calls it)."""
    global _settings  # noqa: PLW0603 - one runtime per process, by design
    _settings = settings


def current(settings: Settings | None = None) -> Runtime:
    """This process's runtime, built on first use and rebuilt after a fork (PID check).

    ``settings`` (else the installed ones) are used only when the runtime has to be built.
    """
    global _runtime  # noqa: PLW0603 - one runtime per process, by design
    with _guard:
        if _runtime is None or _runtime.pid != os.getpid():
            chosen = settings or _settings
            if chosen is None:
                raise RuntimeError("worker runtime used before its settings were installed")
            _runtime = Runtime(chosen)
        return _runtime


@contextlib.contextmanager
def use(rt: Runtime) -> Iterator[Runtime]:
    """Make ``rt`` this process's runtime for the block (the testing switch).

    Handling code asks :func:`current` for its runtime; a test builds one with an injected store
    and judge and runs the handler in-process under ``with runtime.use(rt):``. The previous
    runtime (usually none) comes back afterwards; ``rt`` is not closed (its owner closes it).
    """
    global _runtime  # noqa: PLW0603 - one runtime per process, by design
    with _guard:
        previous, _runtime = _runtime, rt
    try:
        yield rt
    finally:
        with _guard:
            _runtime = previous


def shutdown() -> None:
    """Close this process's runtime if it was built here."""
    global _runtime
    with _guard:
        runtime, _runtime = _runtime, None
    if runtime is not None and runtime.pid == os.getpid():
        runtime.close()
