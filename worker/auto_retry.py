"""The automatic retry policy: a periodic pass that retries what a judge outage failed.

Off unless the configuration allows more than one attempt (``[retry] max_attempts`` /
``EVALQ_RETRY_MAX_ATTEMPTS`` > 1). ``evalq worker`` then runs one pass every
:func:`pass_interval_s` in a background thread of its top process (the supervisor, or the single
consumer process): the pass is :func:`worker.retrying.retry_failed` with the configured reasons,
bounded by ``max_attempts`` and an exponential back-off — attempt N + 1 of a snapshot is due
``backoff_s * 2 ** (N - 1)`` seconds after attempt N was recorded — so a judge that stays down is
asked again less and less often, and at most ``max_attempts`` times in all.

Why a pass over the store and not a delayed message: a worker dead-letters every message with an
``eta``/``countdown`` (``SCHEDULED``: a delayed message sits in a worker's memory, outside the
broker's visibility and restore rules), and the store already knows which newest attempts failed
and when; a pass that finds them again after a restart loses nothing.

The pass considers attempts recorded within :func:`lookback_s` (a day, or longer with long
back-offs); older failures are ``evalq retry --since``'s. A pass sends an attempt once per
:func:`resend_after_s` (a minute, or ``backoff_s`` if longer), so a retry still queued is not sent
again by the next pass. Several workers with the policy on each run the pass: they may send the
same attempt twice, which the store records once (the same attempt has the same evaluation id),
though each copy may ask the judge. Turn the policy on in one worker (e.g. the backfill pool) to
avoid that. A pass that fails (store or broker away) logs
its reason and tries again at the next interval.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from worker.retrying import Admit, RetryChoice, RetrySummary, due, retry_failed
from worker.settings import RetryConfig, Settings
from worker.store import RecordScope, RetryCandidate, Store, StoreError, open_store

__all__ = ["AutoRetry", "automatic_retries", "lookback_s", "pass_interval_s", "resend_after_s"]

_log = logging.getLogger(__name__)
_MIN_INTERVAL_S = 0.5
_MAX_INTERVAL_S = 60.0
_MIN_LOOKBACK_S = 86_400.0


def pass_interval_s(policy: RetryConfig) -> float:
    """Seconds between passes: half the first back-off, within 0.5 s .. 60 s."""
    return min(_MAX_INTERVAL_S, max(_MIN_INTERVAL_S, policy.backoff_s / 2))


def lookback_s(policy: RetryConfig) -> float:
    """How far back a pass looks: a day, or twice the whole back-off schedule if longer."""
    schedule_s = sum(policy.due_after_s(n) for n in range(1, policy.max_attempts))
    return max(_MIN_LOOKBACK_S, 2 * schedule_s)


def resend_after_s(policy: RetryConfig) -> float:
    """How long a pass waits before sending the same attempt again: at least a minute.

    Passes run far more often than a retry takes to be recorded; without this, a pass would send
    a second copy of an attempt still queued, which two consumer processes could then evaluate
    at the same moment (one record, two judge requests). A copy lost with a broker is sent again
    after this long.
    """
    return max(60.0, policy.backoff_s)


class AutoRetry:
    """The periodic pass of one worker (see the module); :meth:`run_once` is one pass."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policy = settings.retry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: Store | None = None
        self._last_skipped: tuple[tuple[str, int], ...] = ()
        self._sent: dict[str, float] = {}  # superseded evaluation id -> when its retry was sent

    def run_once(self, now: datetime | None = None) -> RetrySummary:
        """One pass: enqueue every due retry (see the module)."""
        from worker.producing import producer_for  # noqa: PLC0415 - Celery only when used

        now = now or datetime.now(UTC)
        admit = self._admit(due(self.policy.due_after_s, now))
        since = now - timedelta(seconds=lookback_s(self.policy))
        choice = RetryChoice(self.policy.reasons, scope=RecordScope(since=since))
        if self._store is None:
            self._store = open_store(self.settings.store_url)
        with producer_for(self.settings) as producer:
            return retry_failed(
                self._store,
                producer,
                choice,
                batch_size=self.settings.batch_size,
                last_attempt=self.policy.max_attempts,
                admit=admit,
                now=now,
            )

    def _admit(self, is_due: Admit) -> Admit:
        """Due candidates, each sent once per :func:`resend_after_s` (see the module)."""
        clock_s = time.monotonic()
        resend_s = resend_after_s(self.policy)
        self._sent = {k: t for k, t in self._sent.items() if clock_s - t < resend_s}

        def admit(candidate: RetryCandidate) -> bool:
            if not is_due(candidate) or candidate.evaluation_id in self._sent:
                return False
            self._sent[candidate.evaluation_id] = clock_s
            return True

        return admit

    def start(self) -> None:
        """Run a pass every :func:`pass_interval_s` in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="evalq-auto-retry", daemon=True)
        self._thread.start()
        _log.info(
            "automatic retry on: up to %d attempts, back-off %g s (reasons %s)",
            self.policy.max_attempts,
            self.policy.backoff_s,
            ",".join(self.policy.reasons),
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (a pass under way finishes first, bounded) and close the store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._store is not None:
            self._store.close()
            self._store = None

    def _loop(self) -> None:
        interval_s = pass_interval_s(self.policy)
        while not self._stop.wait(interval_s):
            try:
                summary = self.run_once()
            except StoreError as exc:
                _log.warning("automatic retry pass failed: store %s", exc.code)
                continue
            except Exception as exc:  # noqa: BLE001 - a broker away: the next pass tries again
                _log.warning("automatic retry pass failed (%s)", type(exc).__name__)
                continue
            self._say_skipped(summary)

    def _say_skipped(self, summary: RetrySummary) -> None:
        """Log what cannot be retried when it changed (not every pass: passes are frequent)."""
        counts = tuple(sorted(summary.not_retryable.items()))
        if counts == self._last_skipped:
            return
        self._last_skipped = counts
        if counts:
            codes = ", ".join(f"{code} {n}" for code, n in counts)
            _log.info("automatic retry: %d not retried (%s)", summary.skipped, codes)


@contextlib.contextmanager
def automatic_retries(settings: Settings) -> Iterator[AutoRetry | None]:
    """The policy's pass while the block runs, when the configuration turns it on."""
    if not settings.retry.automatic:
        yield None
        return
    auto = AutoRetry(settings)
    auto.start()
    try:
        yield auto
    finally:
        auto.stop()
