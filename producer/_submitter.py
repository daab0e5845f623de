"""Live submission that never slows down or breaks the application it lives in.

:class:`LiveSubmitter` sits between a request handler and the broker. ``submit`` only appends to
a bounded in-memory buffer under a lock held for microseconds and returns; ONE daemon thread
drains the buffer in batches and calls ``send``. Nothing on the calling thread touches the
network, logs, or raises.

Why drop-with-a-counter instead of blocking or growing: an evaluation pipeline is an observer.
When the broker is down the application must keep serving at full speed and must not run out of
memory, so the buffer is bounded (``capacity``) and a submission that finds it full is dropped
and counted (``dropped_full``). A batch whose send keeps failing is retried with exponential
backoff (stamina, bounded by attempts and time), then dropped and counted (``dropped_failed``)
with one log line holding a reason code and a count — never snapshot content. The counters are
the honest record of what was not evaluated; operators alert on them.

Why new submissions are dropped rather than the oldest: the buffered ones are already paid for
and ordered; dropping the newest keeps the buffer's contents stable while the broker is away.

Delivery is at-least-once from here on: a batch whose send raised after the broker took part of
it is retried whole; the worker's idempotency (one evaluation per snapshot id) absorbs duplicates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import stamina

from .snapshot import Snapshot

__all__ = ["LiveSubmitter", "RetryPolicy", "SendBatch", "SubmitterStats"]

log = logging.getLogger("evalq.producer.submit")

SendBatch = Callable[[Sequence[Snapshot]], None]
"""Sends one batch to the broker; raises on failure (the whole batch is then retried).

A ``TypeError``/``ValueError`` (a snapshot that cannot be encoded) must be raised before any
of the batch is published: the batch is then sent again one snapshot at a time, so only the
bad one is dropped.
"""

_NOT_RETRIED = (TypeError, ValueError)  # encoding bugs: retrying cannot help


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded exponential backoff for one batch (stamina's parameters, with units)."""

    attempts: int = 10
    timeout_s: float = 30.0
    wait_initial_s: float = 0.1
    wait_max_s: float = 2.0
    wait_jitter_s: float = 0.1


@dataclass(frozen=True, slots=True)
class SubmitterStats:
    """Counters since construction. ``pending`` = buffered + the batch being sent (<= capacity)."""

    submitted: int
    sent: int
    dropped_full: int
    dropped_failed: int
    dropped_closed: int
    dropped_error: int
    pending: int
    periodic_failed: int

    @property
    def dropped(self) -> int:
        """Every snapshot that will never be sent, whatever the reason."""
        return self.dropped_full + self.dropped_failed + self.dropped_closed + self.dropped_error


class LiveSubmitter:
    """Bounded buffer + one background flusher thread (see the module docstring).

    ``periodic`` (optional) runs on the flusher thread every ``periodic_interval_s`` and once at
    close, e.g. ``lambda: sampler.report(send_tally)`` to ship sampled-out counts; its failures are
    counted (``periodic_failed``) and logged by exception type only.
    """

    def __init__(
        self,
        send: SendBatch,
        *,
        capacity: int = 10_000,
        batch_size: int = 100,
        flush_interval_s: float = 0.05,
        retry: RetryPolicy = RetryPolicy(),
        periodic: Callable[[], object] | None = None,
        periodic_interval_s: float = 60.0,
        name: str = "live",
    ) -> None:
        if capacity < 1 or batch_size < 1 or flush_interval_s <= 0:
            raise ValueError("capacity and batch_size must be >= 1, flush_interval_s > 0")
        self._send = send
        self.capacity = capacity
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry = retry
        self._periodic = periodic
        self._periodic_interval_s = periodic_interval_s
        self.name = name
        self._reset_state()
        self._start()
        _track_for_fork(self)

    # -- state -------------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._buffer: deque[Snapshot] = deque()
        self._inflight = 0
        self._closed = False
        self._close_deadline: float | None = None
        self._counts = dict.fromkeys(
            ("submitted", "sent", "dropped_full", "dropped_failed", "dropped_closed"), 0
        )
        self._counts |= {"dropped_error": 0, "periodic_failed": 0}
        self._logged_full = 0
        self._next_periodic = time.monotonic() + self._periodic_interval_s

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"evalq-submit-{self.name}", daemon=True
        )
        self._thread.start()

    def _after_fork_in_child(self) -> None:
        # The flusher thread does not survive fork (gunicorn --preload, multiprocessing): the child
        # gets fresh locks, an empty buffer (the parent still owns its buffered snapshots) and a
        # flusher of its own.
        self._reset_state()
        self._start()

    # -- request path ------------------------------------------------------------------------

    def submit(self, snapshot: Snapshot) -> bool:
        """Buffer ``snapshot`` for sending; ``False`` if it was dropped. Never blocks or raises."""
        try:
            with self._lock:
                if self._closed:
                    self._counts["dropped_closed"] += 1
                    return False
                if len(self._buffer) + self._inflight >= self.capacity:
                    self._counts["dropped_full"] += 1
                    return False
                idle = not self._buffer and not self._inflight
                self._buffer.append(snapshot)
                self._counts["submitted"] += 1
                full_batch = len(self._buffer) >= self.batch_size
            if idle or full_batch:
                # An idle flusher sends at once (no linger: a live snapshot's latency); while a
                # send is under way, later snapshots gather into the next batch by themselves.
                self._wake.set()
        except Exception:  # noqa: BLE001 - the request path must never see our failures
            self._count_error()
            return False
        return True

    def _count_error(self) -> None:
        # Lock-free on purpose (the lock may be the problem); best effort, never raising.
        with contextlib.suppress(Exception):
            self._counts["dropped_error"] += 1

    # -- control -----------------------------------------------------------------------------

    def stats(self) -> SubmitterStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            pending = len(self._buffer) + self._inflight
            return SubmitterStats(pending=pending, **self._counts)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Ask the flusher to drain now; wait (bounded) until nothing is pending.

        ``True`` means nothing is left to send — delivered or dropped; :meth:`stats` tells which.
        """
        self._wake.set()
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._buffer or self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._idle.wait(remaining)
        return True

    def close(self, timeout_s: float = 5.0) -> SubmitterStats:
        """Stop accepting, drain for at most ``timeout_s``, count what is left as dropped_closed."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close_deadline = time.monotonic() + timeout_s
        self._wake.set()
        self._thread.join(timeout_s)
        with self._lock:
            self._counts["dropped_closed"] += len(self._buffer)
            self._buffer.clear()
        return self.stats()

    def __enter__(self) -> LiveSubmitter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- flusher thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            try:
                self._cycle()
            except Exception as exc:  # noqa: BLE001 - the flusher must outlive its own bugs
                log.warning("evalq.submit.flusher_error error_type=%s", type(exc).__name__)
            with self._lock:
                done = self._closed and not self._buffer
            if done:
                self._maybe_periodic(force=True)
                return

    def _cycle(self) -> None:
        self._drain()
        self._log_full_drops()
        self._maybe_periodic(force=False)

    def _take(self) -> list[Snapshot]:
        with self._lock:
            n = min(self.batch_size, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(n)]
            self._inflight = n
            if not batch:
                self._idle.notify_all()
            return batch

    def _drain(self) -> None:
        while batch := self._take():
            outcomes = self._deliver(batch)
            with self._lock:
                for outcome, count in outcomes.items():
                    self._counts[outcome] += count
                self._inflight = 0

    def _deliver(self, batch: list[Snapshot]) -> dict[str, int]:
        """Send a batch; counts per outcome. One unencodable snapshot drops only itself."""
        try:
            self._send_with_retry(batch)
        except _NOT_RETRIED as exc:
            if len(batch) > 1:
                # The send hook encodes the whole batch before publishing any of it (so nothing
                # was sent): the snapshots are tried one by one, the bad one alone is dropped.
                outcomes: dict[str, int] = {"sent": 0, "dropped_failed": 0}
                for snapshot in batch:
                    for outcome, count in self._deliver([snapshot]).items():
                        outcomes[outcome] = outcomes.get(outcome, 0) + count
                return outcomes
            self._log_drop("ENCODE_ERROR", len(batch), exc)
            return {"dropped_failed": len(batch)}
        except Exception as exc:  # noqa: BLE001 - any broker failure ends in a counted drop
            self._log_drop("SEND_FAILED", len(batch), exc)
            return {"dropped_failed": len(batch)}
        return {"sent": len(batch)}

    def _send_with_retry(self, batch: list[Snapshot]) -> None:
        policy = self.retry
        for attempt in stamina.retry_context(
            on=self._should_retry,
            attempts=policy.attempts,
            timeout=policy.timeout_s,
            wait_initial=policy.wait_initial_s,
            wait_max=policy.wait_max_s,
            wait_jitter=policy.wait_jitter_s,
        ):
            with attempt:
                self._send(batch)

    def _should_retry(self, exc: BaseException) -> bool:
        if isinstance(exc, _NOT_RETRIED):
            return False
        deadline = self._close_deadline  # closing: stop retrying once the close budget is spent
        return deadline is None or time.monotonic() < deadline

    def _log_drop(self, reason: str, count: int, exc: Exception) -> None:
        log.warning(
            "evalq.submit.dropped lane=%s reason=%s count=%d error_type=%s code=%s",
            self.name,
            reason,
            count,
            type(exc).__name__,
            getattr(exc, "code", "-"),  # a BrokerError's BrokerFailure: why the broker failed
        )

    def _log_full_drops(self) -> None:
        # Logged here, not in submit(): the request path does no I/O, and one line per flush
        # interval summarises any number of drops.
        dropped = self._counts["dropped_full"]
        if dropped > self._logged_full:
            log.warning(
                "evalq.submit.dropped lane=%s reason=BUFFER_FULL count=%d",
                self.name,
                dropped - self._logged_full,
            )
            self._logged_full = dropped

    def _maybe_periodic(self, *, force: bool) -> None:
        if self._periodic is None or not (force or time.monotonic() >= self._next_periodic):
            return
        self._next_periodic = time.monotonic() + self._periodic_interval_s
        try:
            self._periodic()
        except Exception as exc:  # noqa: BLE001 - a failed tally must not stop the flusher
            with self._lock:
                self._counts["periodic_failed"] += 1
            log.warning(
                "evalq.submit.periodic_failed lane=%s error_type=%s", self.name, type(exc).__name__
            )


_LIVE: weakref.WeakSet[LiveSubmitter] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for submitter in list(_LIVE):
        submitter._after_fork_in_child()


def _track_for_fork(submitter: LiveSubmitter) -> None:
    _LIVE.add(submitter)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
