"""Evaluator processes: one Celery consumer, evaluation CPU on more than one core.

A worker process holds one GIL, and a busy backfill worker spends it on evaluation (decoding,
planning, the judge exchange, records): ~1.0 core at most, whatever the pool size
(docs/concurrency.md). With ``EVALQ_EVALUATOR_PROCESSES=N`` (threads pool only) the Celery worker
keeps its one consumer and its pool threads, and each pool thread hands its whole message to one
of N evaluator processes and waits for the answer. An evaluator process is a worker runtime of
its own (loop, judge client, store, ``concurrency // N`` evaluation slots) that runs several
messages at once, one per thread, exactly as the task body runs them in-process: decode,
evaluate, record, dead-letter. Processes are *spawned*, not forked: the parent runs threads.

Failure model (the message is acked only after its evaluator answered):

- An evaluator that dies (killed, crashed) fails the messages it held with
  :class:`EvaluatorLost`; the task rejects each with requeue, the broker delivers it again, and
  the store's skip-if-done and idempotent writes keep every evaluation exactly once. The next
  message starts a new process.
- An evaluator that has not answered within ``longest_task_s + ANSWER_MARGIN_S`` is killed
  (the same path).
- An evaluator whose parent died exits within a second (it watches its parent's pid): the
  parent's messages come back from the broker's unacked set, so nothing evaluates them twice
  unrecorded.

Exceptions::

    EvaluatorError          transient: the task requeues its message
    └── EvaluatorLost       the process died, did not start, or stopped answering
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from typing import Any

from worker import metrics, runtime
from worker.settings import Settings

__all__ = [
    "ANSWER_MARGIN_S",
    "EvaluatorError",
    "EvaluatorLost",
    "EvaluatorPool",
    "Handler",
    "child_settings",
    "current",
    "shutdown",
]

_log = logging.getLogger(__name__)
ANSWER_MARGIN_S = 30.0
"""How long past ``longest_task_s`` a parent waits for an evaluator before killing it."""
_START_TIMEOUT_S = 60.0
_PARENT_CHECK_S = 0.5

Handler = Callable[[runtime.Runtime, tuple[Any, ...], dict[str, Any], Any], str | None]
"""Runs one message in an evaluator: ``(rt, args, kwargs, lane)`` → ``None`` or a requeue code."""


class EvaluatorError(Exception):
    """An evaluator could not answer for a message (transient: requeue it)."""

    code = "EVALUATOR_ERROR"


class EvaluatorLost(EvaluatorError):
    """The evaluator process died, did not start, or stopped answering."""

    code = "EVALUATOR_LOST"


def child_settings(settings: Settings) -> Settings:
    """An evaluator's settings: its share of the slots and messages, no exporter, no children."""
    processes = settings.evaluator_processes
    return settings.model_copy(
        update={
            "evaluator_processes": 0,
            "concurrency": max(1, settings.concurrency // processes),
            "pool_threads": max(1, -(-settings.pool_size // processes)),
            "metrics_port": None,
        }
    )


# --- the evaluator process ---------------------------------------------------------------------


def _watch_parent(parent_pid: int) -> None:
    """Exit as soon as the parent is gone (its messages return from the broker's unacked set)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="evalq-parent-watch", daemon=True).start()


def _configure_logging(settings: Settings) -> None:
    from worker.signals import install_redaction  # noqa: PLC0415 - logging setup of a child only

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s: %(levelname)s/evaluator-%(process)d] %(message)s")
    )
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    install_redaction(root)


def _answer(
    rt: runtime.Runtime, handler: Handler, conn: Connection, lock: threading.Lock, request: Any
) -> None:
    request_id, args, kwargs, lane = request
    try:
        code = handler(rt, args, kwargs, lane)
    except BaseException as exc:  # noqa: BLE001 - the parent must hear back whatever happened
        _log.error("evaluator failed: %s (%s)", EvaluatorError.code, type(exc).__name__)
        code = EvaluatorError.code
    with lock:
        conn.send((request_id, code))


def _started(settings: Settings, conn: Connection) -> runtime.Runtime | None:
    try:
        rt = runtime.current(settings)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a code, never as text
        conn.send(("failed", getattr(exc, "code", type(exc).__name__)))
        return None
    runtime.tune_gc(settings.gc_gen0_threshold)
    conn.send(("ready", os.getpid()))
    return rt


def serve(conn: Connection, settings: Settings, handler: Handler, parent_pid: int) -> None:
    """An evaluator process's main: answer requests until the parent says stop (``None``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    _watch_parent(parent_pid)
    _configure_logging(settings)
    runtime.install(settings)
    rt = _started(settings, conn)
    if rt is None:
        return
    lock = threading.Lock()
    pool = ThreadPoolExecutor(settings.pool_size, thread_name_prefix="evalq-eval")
    with pool, contextlib.suppress(EOFError, OSError):
        while (request := conn.recv()) is not None:
            pool.submit(_answer, rt, handler, conn, lock, request)
    runtime.shutdown()


# --- the parent's side -------------------------------------------------------------------------


class _Evaluator:
    """One evaluator process, its pipe, and the futures of the messages it holds."""

    def __init__(self, settings: Settings, handler: Handler) -> None:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        self.process = context.Process(
            target=serve,
            args=(theirs, settings, handler, os.getpid()),
            name="evalq-evaluator",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self._conn = ours
        self._lock = threading.Lock()
        self._pending: dict[int, Future[str | None]] = {}
        self._ids = itertools.count()
        self.alive = self._handshake()
        self._reader = threading.Thread(target=self._read, name="evalq-evaluator-pipe", daemon=True)
        self._reader.start()

    def _handshake(self) -> bool:
        if not self._conn.poll(_START_TIMEOUT_S):
            _log.error("evaluator did not start: %s", EvaluatorLost.code)
            self.process.kill()
            return False
        with contextlib.suppress(EOFError, OSError):
            state, detail = self._conn.recv()
            if state == "ready":
                _log.info("evaluator process %s ready", detail)
                return True
            _log.error("evaluator did not start: %s", detail)
        return False

    @property
    def load(self) -> int:
        """Messages this evaluator holds."""
        return len(self._pending)

    def submit(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], lane: Any
    ) -> Future[str | None]:
        """Hand one message over; the future answers ``None`` or a requeue code."""
        future: Future[str | None] = Future()
        with self._lock:
            if not self.alive:
                raise EvaluatorLost(EvaluatorLost.code)
            request_id = next(self._ids)
            self._pending[request_id] = future
            try:
                self._conn.send((request_id, args, kwargs, lane))
            except (OSError, ValueError):
                del self._pending[request_id]
                raise EvaluatorLost(EvaluatorLost.code) from None
        return future

    def _read(self) -> None:
        with contextlib.suppress(EOFError, OSError):
            while self.alive:
                request_id, code = self._conn.recv()
                with self._lock:
                    future = self._pending.pop(request_id, None)
                if future is not None:
                    future.set_result(code)
        self._lost()

    def _lost(self) -> None:
        with self._lock:
            self.alive = False
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(EvaluatorLost(EvaluatorLost.code))
        self.process.join(timeout=5.0)
        if self.process.pid is not None:
            metrics.mark_process_dead(self.process.pid)

    def kill(self) -> None:
        """Stop the process now (its messages fail with :class:`EvaluatorLost`)."""
        self.process.kill()

    def stop(self, timeout_s: float) -> None:
        """Let the process finish what it holds and exit; kill it after ``timeout_s``."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
        self._reader.join(timeout=5.0)
        self._conn.close()


class EvaluatorPool:
    """``processes`` evaluator processes; a message goes to the one holding the fewest."""

    def __init__(self, settings: Settings, handler: Handler) -> None:
        self.pid = os.getpid()
        self._settings = child_settings(settings)
        self._handler = handler
        self._wait_s = settings.longest_task_s + ANSWER_MARGIN_S
        self._lock = threading.Lock()
        self._evaluators = [self._start() for _ in range(settings.evaluator_processes)]

    def _start(self) -> _Evaluator:
        return _Evaluator(self._settings, self._handler)

    def _pick(self) -> _Evaluator:
        with self._lock:
            for i, evaluator in enumerate(self._evaluators):
                if not evaluator.alive:
                    evaluator.stop(timeout_s=0.0)
                    self._evaluators[i] = self._start()
            return min(self._evaluators, key=lambda e: e.load)

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any], lane: Any) -> str | None:
        """Evaluate one message in an evaluator process: ``None``, or the code to requeue it with.

        Raises :class:`EvaluatorLost` when the process died, did not start or did not answer.
        """
        evaluator = self._pick()
        future = evaluator.submit(args, kwargs, lane)
        try:
            return future.result(timeout=self._wait_s)
        except FutureTimeout:
            _log.error("evaluator did not answer: %s; killed", EvaluatorLost.code)
            evaluator.kill()
            raise EvaluatorLost(EvaluatorLost.code) from None

    @property
    def pids(self) -> tuple[int, ...]:
        """Process ids of the evaluators (for operations and tests)."""
        return tuple(e.process.pid for e in self._evaluators if e.process.pid is not None)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop every evaluator (each finishes what it holds first, within ``timeout_s``)."""
        with self._lock:
            for evaluator in self._evaluators:
                evaluator.stop(timeout_s)


_pool: EvaluatorPool | None = None
_guard = threading.Lock()


def current(settings: Settings, handler: Handler) -> EvaluatorPool:
    """This process's evaluator pool, started on first use (and again in a forked child)."""
    global _pool  # noqa: PLW0603 - one pool per worker process, like its runtime
    with _guard:
        if _pool is None or _pool.pid != os.getpid():
            _pool = EvaluatorPool(settings, handler)
        return _pool


def shutdown() -> None:
    """Stop this process's evaluators if they were started here."""
    global _pool
    with _guard:
        pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.close()
