"""Per-process runtime: one background event loop, one judge, one store, one concurrency bound.

Why this shape (celery-notes §2, §3, and the measurements in DESIGN.md):

- **Threads pool + one asyncio loop per process.** Celery 5.7 has no async tasks. The judges are
  async (an aiohttp-backed httpx client keeps hundreds of requests in flight cheaply), and the
  engine enforces its budget by *cancelling* the in-flight request (``asyncio.timeout``), which
  only works on a loop. So each worker process runs one loop in a daemon thread; a task (running
  in a pool thread) hands its evaluation coroutine to that loop with
  ``asyncio.run_coroutine_threadsafe`` and waits. Judge requests of different snapshots in one
  process thus run concurrently on the loop, while the engine keeps one snapshot's groups
  sequential. A loop per task (``asyncio.run``) would rebuild clients per task (25-40 ms CPU each)
  and break loop-bound pools ("Event loop is closed").
- **Built after fork, never at import.** Loops, sockets and connection pools do not survive
  ``fork()``. :func:`current` builds the runtime lazily and rebuilds it when the PID changed;
  :mod:`worker.signals` calls it eagerly from ``worker_process_init`` (prefork children) and
  ``worker_ready`` (the main process: threads pool, and the consumer's dead-letter writes).
- **One shared judge.** HTTP judges own one pooled client: building a client costs 25-40 ms of CPU
  and the aiohttp transport scales to hundreds of requests in flight on one client.
- **A process-wide ``asyncio.Semaphore(concurrency)``** bounds evaluations (hence judge requests:
  one per evaluation at a time) in flight, whatever the pool size and batch sizes are. A snapshot's
  budget starts when it gets a slot, so waiting behind other work never eats its budget: every
  snapshot gets its own full budget.
- **Backstops.** The engine returns a report with TIMEOUT results at its deadline. Should it not
  (a judge that ignores cancellation, a blocked loop), the loop side cancels it at
  ``budget + BACKSTOP_MARGIN_S`` and the task side stops waiting at ``Settings.longest_task_s``;
  both produce an all-TIMEOUT report, so the evaluation is still recorded, never lost.
- **A store per process.** The store is synchronous and thread-safe; pool threads write records
  directly, the consumer thread writes dead letters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from worker import metrics
from worker.evaluation import Entry, Evaluator, MetricResult, Reason, Report, Trace
from worker.judges import ChatJudge, Judge, SyntheticJudge, SystemOneJudge
from worker.metric_sets import MetricSet, build_metric_set
from worker.settings import BACKSTOP_MARGIN_S, JudgeKind, Settings
from worker.store import Store, open_store

__all__ = [
    "Outcome",
    "Runtime",
    "Submitted",
    "current",
    "install",
    "judge_identity",
    "lower_priority",
    "open_worker_store",
    "shutdown",
    "timeout_report",
    "tune_gc",
]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
_SYSTEMONE_DEFAULT_URL = "https://api.typesafe.ai"
_SYSTEMONE_DEFAULT_MODEL = "jev-latest"


def judge_identity(settings: Settings) -> str:
    """The judge's name in metric-set versions and records: ``synthetic``, ``systemone:<model>``…"""
    if settings.judge is JudgeKind.SYNTHETIC:
        return "synthetic"
    if settings.judge is JudgeKind.SYSTEMONE:
        return f"systemone:{settings.judge_model or _SYSTEMONE_DEFAULT_MODEL}"
    return f"chat:{settings.judge_model}"


def _build_judge(settings: Settings) -> Judge:
    """The configured judge; keys come from this process's environment via ``Settings``."""
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    if settings.judge is JudgeKind.SYNTHETIC:
        return SyntheticJudge()
    if settings.judge is JudgeKind.SYSTEMONE:
        return SystemOneJudge(
            base_url=settings.judge_url or _SYSTEMONE_DEFAULT_URL,
            api_key=key,
            model=settings.judge_model or _SYSTEMONE_DEFAULT_MODEL,
        )
    assert settings.judge_url is not None  # Settings requires both for the chat judge
    assert settings.judge_model is not None
    return ChatJudge.openai_compatible(settings.judge_url, settings.judge_model, api_key=key)


def open_worker_store(settings: Settings) -> Store:
    """The store of one worker process; its pool is sized for the pool threads that write."""
    return open_store(settings.store_url, pool_max_size=max(4, min(settings.concurrency, 16)))


def tune_gc(gen0_threshold: int) -> None:
    """Collect cycles every ``gen0_threshold`` allocations instead of CPython's 700.

    A snapshot allocates thousands of short-lived containers (frozen JSON, models), freed by
    reference counting; at 700 the cycle collector ran ~0.6 collections per snapshot and took
    ~0.6 ms of its ~3 ms of CPU (measured with ``gc.callbacks``). At 50,000 it took 0.04 ms, and
    the garbage waiting for a collection stays bounded (a few MB). Older generations keep
    CPython's ratios. What start-up built (modules, schemas, metric sets) is frozen out of every
    later collection: it lives as long as the process. Called once per worker process, after its
    runtime is built (never from library code: freezing is process-wide).
    """
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    gc.freeze()


def lower_priority(nice: int) -> None:
    """Run this process (every thread, on Linux) at CPU niceness ``nice`` (0 = unchanged).

    For a backfill pool sharing machines with a live pool (``EVALQ_NICE=10``): the kernel then
    gives a runnable live worker the CPU first (``bench/live_latency.py`` runs its backfill pool
    so). Threads started later inherit it from their creator.
    """
    if nice <= 0:
        return
    tasks = Path("/proc/self/task")
    ids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in ids:
        with contextlib.suppress(OSError):  # a thread that just ended
            current = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, max(nice, current))


def timeout_report(trace_id: str, metric_set: MetricSet, elapsed_s: float) -> Report:
    """An all-TIMEOUT report, for when the backstop (not the engine) ended an evaluation."""
    timeout = MetricResult.error(Reason.TIMEOUT)
    entries = tuple(Entry(id=m.id, version=m.version, result=timeout) for m in metric_set.metrics)
    return Report(trace_id=trace_id, results=entries, requests=0, usage=(), elapsed_s=elapsed_s)


@dataclass(frozen=True)
class Outcome:
    """One finished evaluation: the report, when it started, and whether a backstop ended it.

    ``started_s`` is ``time.monotonic()`` when the evaluation got its slot (its budget's start).
    """

    report: Report
    started_at: datetime
    started_s: float
    backstop: bool


@dataclass(frozen=True)
class Submitted:
    """The evaluations of one message in flight (:meth:`Runtime.submit_many`).

    ``outcomes[i]`` is filled on the loop when evaluation ``i`` ends (an exception there is a
    bug); ``None`` means still running. ``future`` completes when all of them have ended.
    """

    outcomes: list[Outcome | BaseException | None]
    future: concurrent.futures.Future[None]

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s``; True if every evaluation ended, else cancel the rest."""
        try:
            self.future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self.future.cancel()  # cancels the evaluations still running on the loop
            return False
        return True


class Runtime:
    """Loop thread + judge + store + evaluators of one worker process (see the module docstring)."""

    def __init__(
        self, settings: Settings, *, store: Store | None = None, judge: Judge | None = None
    ) -> None:
        """Start the loop thread, then build the judge on it and open the store.

        ``store`` and ``judge`` replace the configured ones (tests, embedding); an injected store
        stays open on :meth:`close` (its owner closes it).
        """
        self.settings = settings
        self.pid = os.getpid()
        # The GIL is handed over every switch interval (5 ms by default); every blocking call
        # (a store statement, a socket read) waits for that hand-over when another thread is
        # busy. Shorter is measured better here: fewer milliseconds per store statement held
        # under the write lock, a more responsive loop (docs/concurrency.md).
        sys.setswitchinterval(settings.switch_interval_ms / 1000)
        lower_priority(settings.nice)  # before the loop thread starts: threads inherit it
        self.limits = settings.limits
        self.judge_name = judge_identity(settings)
        self._metric_sets: dict[str, tuple[MetricSet, Evaluator]] = {}
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="evalq-loop", daemon=True)
        self._thread.start()
        raw = judge if judge is not None else self.call(self._make_judge())
        model = getattr(raw, "model", None)
        self.judge_model: str | None = model if isinstance(model, str) else None
        self.judge: Judge = metrics.MeteredJudge(raw)  # status + latency of every request
        self._slots: asyncio.Semaphore = self.call(self._make_slots())
        self._owns_store = store is None
        self.store: Store = store if store is not None else open_worker_store(settings)
        # Built now, not by the first message: building a set takes a noticeable fraction of a
        # second, under a lock that every pool thread needs (measured: +150 ms on the first
        # live evaluations after a start).
        self.metric_set(settings.metric_set)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _make_judge(self) -> Judge:
        # Built on the loop: HTTP clients bind to the loop that first uses them.
        return _build_judge(self.settings)

    async def _make_slots(self) -> asyncio.Semaphore:
        return asyncio.Semaphore(self.settings.concurrency)

    def call(self, coro: Coroutine[Any, Any, _T], timeout_s: float = 30.0) -> _T:
        """Run ``coro`` on the loop and wait for it (setup and teardown only)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    # -- metric sets ----------------------------------------------------------------------------

    def metric_set(self, name: str) -> tuple[MetricSet, Evaluator]:
        """The resolved set and its evaluator (built once per name; ``UnknownMetricSet``)."""
        with self._lock:
            found = self._metric_sets.get(name)
            if found is None:
                resolved = build_metric_set(
                    name,
                    thresholds=self.settings.effective_thresholds,
                    judge=self.judge_name,
                    limits=self.limits,
                )
                found = (resolved, Evaluator(self.judge, resolved.metrics, self.limits))
                metrics.allow_metric_ids(resolved.metric_ids)
                self._metric_sets[name] = found
            return found

    # -- evaluation ----------------------------------------------------------------------------

    def submit(self, trace: Trace, name: str) -> concurrent.futures.Future[Outcome]:
        """Start evaluating ``trace`` with metric set ``name`` on the loop."""
        metric_set, evaluator = self.metric_set(name)
        return asyncio.run_coroutine_threadsafe(
            self._evaluate(evaluator, metric_set, trace), self.loop
        )

    def submit_many(self, work: Sequence[tuple[Trace, str]]) -> Submitted:
        """Start every ``(trace, metric set name)`` of one message with ONE hand-over to the loop.

        Measured: a thread-safe hand-over per snapshot (a future, a lock, a wake-up of the loop)
        cost more than the rest of the task body for a backfill batch. Each evaluation still runs
        on its own under the concurrency bound, in order, with its own budget.
        """
        resolved = [(trace, *self.metric_set(name)) for trace, name in work]
        outcomes: list[Outcome | BaseException | None] = [None] * len(resolved)

        async def one(
            index: int, trace: Trace, metric_set: MetricSet, evaluator: Evaluator
        ) -> None:
            try:
                outcomes[index] = await self._evaluate(evaluator, metric_set, trace)
            except Exception as exc:  # noqa: BLE001 - handed to the task, which treats it as a bug
                outcomes[index] = exc

        async def run_all() -> None:
            await asyncio.gather(*(one(i, *item) for i, item in enumerate(resolved)))

        return Submitted(outcomes, asyncio.run_coroutine_threadsafe(run_all(), self.loop))

    async def _evaluate(self, evaluator: Evaluator, metric_set: MetricSet, trace: Trace) -> Outcome:
        async with self._slots:
            started_at = datetime.now(UTC)
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.settings.budget_s + BACKSTOP_MARGIN_S):
                    report = await evaluator.evaluate(trace)
            except TimeoutError:
                _log.warning("evaluation backstop: %s", Reason.TIMEOUT)
                elapsed_s = time.monotonic() - started
                report = timeout_report(trace.id, metric_set, elapsed_s)
                return Outcome(report, started_at, started, backstop=True)
            return Outcome(report, started_at, started, backstop=False)

    # -- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the judge's client and the store, and stop the loop."""
        aclose = getattr(self.judge, "aclose", None)
        if aclose is not None:
            try:
                self.call(aclose(), timeout_s=5.0)
            except Exception as exc:  # noqa: BLE001 - shutdown must go on
                _log.warning("judge close failed: %s", type(exc).__name__)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
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


def shutdown() -> None:
    """Close this process's runtime if it was built here."""
    global _runtime
    with _guard:
        runtime, _runtime = _runtime, None
    if runtime is not None and runtime.pid == os.getpid():
        runtime.close()
