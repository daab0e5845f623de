"""Re-evaluation after a failure: find the snapshots to retry and enqueue their next attempt.

A judge outage (down, or a wrong key) records every judged metric ``ERROR BACKEND_ERROR`` (or
``TIMEOUT``); re-sending the snapshot would find it "already evaluated". A *retry* instead asks
for the next attempt: the store keeps one evaluation per (snapshot, metric-set version,
attempt), so attempt N + 1 is a new record, linked to attempt N, and attempt N stays as it was.

:func:`retry_failed` is the one implementation behind ``evalq retry`` and the automatic policy
(:mod:`worker.auto_retry`): it walks the newest attempt of every (snapshot, metric-set version)
whose results carry one of the chosen reason codes (``Store.iter_retry_candidates``), reads the
snapshot's content back from ``snapshot_contents`` and sends a
:class:`~producer.Reevaluation` of the next attempt on the backfill lane (catch-up work never
queues ahead of live traffic; a deployment needs a worker serving the backfill lane for it).
A snapshot that cannot be retried is counted with a :class:`NotRetryable` code, never a failure
of the whole run. Nothing is written to the store: the workers write the new attempts.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from producer import Reevaluation, Snapshot
from producer.snapshot import MAX_ATTEMPTS
from worker.store import (
    PermanentStoreError,
    RecordScope,
    RetryCandidate,
    RetryQuery,
    Store,
    StoreCode,
)

__all__ = [
    "Admit",
    "NotRetryable",
    "RetryChoice",
    "RetrySender",
    "RetrySkip",
    "RetrySummary",
    "due",
    "retry_failed",
]

_log = logging.getLogger(__name__)
_SHOWN = 20  # not-retryable examples a summary keeps


class NotRetryable(enum.StrEnum):
    """Why a snapshot whose newest attempt failed is not re-enqueued."""

    CONTENT_NOT_KEPT = (
        StoreCode.CONTENT_NOT_KEPT.value
    )  # evalq purge expired its content: nothing to send
    CONTENT_MISMATCH = StoreCode.CONTENT_MISMATCH.value  # its stored content fails its hash
    MAX_ATTEMPTS = "MAX_ATTEMPTS"  # the contract's (or the policy's) last attempt failed
    NOT_AN_ATTEMPT = "NOT_AN_ATTEMPT"  # a run named like an attempt that is not one


class RetrySender(Protocol):
    """What :func:`retry_failed` sends with (a :class:`producer.Producer`)."""

    def reevaluate_many(self, items: Iterator[Reevaluation], *, batch_size: int = 1) -> int: ...


@dataclass(frozen=True)
class RetryChoice:
    """Which newest attempts to retry: those with a result of ``reasons`` (of ``metric_id``
    only, when set), recorded in ``scope`` (``since``, ``backfill_id``, …)."""

    reasons: tuple[str, ...]
    metric_id: str | None = None
    scope: RecordScope | None = None

    def query(self, now: datetime) -> RetryQuery:
        """The store's form of this choice, bounded to what was recorded before ``now``.

        The bound keeps one pass from chaining attempts: a retry that fails again while the
        pass is still listing is recorded after ``now``, and is the next pass's business.
        """
        scope = self.scope or RecordScope()
        until = now if scope.until is None else min(scope.until, now)
        bounded = scope.model_copy(update={"until": until})
        return RetryQuery(reasons=self.reasons, metric_id=self.metric_id, scope=bounded)


@dataclass(frozen=True)
class RetrySkip:
    """One snapshot not re-enqueued, by ids and a code (never content)."""

    snapshot_id: str
    metric_set_version: str
    attempt: int | None
    code: NotRetryable

    def __str__(self) -> str:
        attempt = "?" if self.attempt is None else self.attempt
        return (
            f"snapshot {self.snapshot_id[:16]} {self.metric_set_version} attempt {attempt}: "
            f"{self.code}"
        )


@dataclass
class RetrySummary:
    """What one retry pass found and did."""

    examined: int = 0
    enqueued: int = 0
    not_due: int = 0
    not_retryable: dict[NotRetryable, int] = field(default_factory=dict)
    examples: list[RetrySkip] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Snapshots that cannot be retried (every code)."""
        return sum(self.not_retryable.values())

    def count_skip(self, candidate: RetryCandidate, code: NotRetryable) -> None:
        """Count one snapshot not retried (and keep it as an example, up to 20)."""
        self.not_retryable[code] = self.not_retryable.get(code, 0) + 1
        if len(self.examples) < _SHOWN:
            self.examples.append(
                RetrySkip(
                    candidate.snapshot_id, candidate.metric_set_version, candidate.attempt, code
                )
            )


Admit = Callable[[RetryCandidate], bool]
"""A further filter (the automatic policy's back-off): False leaves a candidate for later."""


def _retryable_attempt(
    candidate: RetryCandidate, last_attempt: int, summary: RetrySummary
) -> int | None:
    """The candidate's attempt if a next one may follow, else None (counted with its code)."""
    attempt = candidate.attempt
    if attempt is None:
        summary.count_skip(candidate, NotRetryable.NOT_AN_ATTEMPT)
        return None
    if attempt >= last_attempt:
        summary.count_skip(candidate, NotRetryable.MAX_ATTEMPTS)
        return None
    return attempt


def _next_attempt(
    store: Store, candidate: RetryCandidate, attempt: int, summary: RetrySummary
) -> Reevaluation | None:
    if not candidate.content_kept:
        summary.count_skip(candidate, NotRetryable.CONTENT_NOT_KEPT)
        return None
    try:
        record = store.get_snapshot(candidate.snapshot_id)
    except PermanentStoreError as exc:
        if exc.code != NotRetryable.CONTENT_MISMATCH:
            raise
        summary.count_skip(candidate, NotRetryable.CONTENT_MISMATCH)
        return None
    if record is None:  # purged between the listing and this read
        summary.count_skip(candidate, NotRetryable.CONTENT_NOT_KEPT)
        return None
    snapshot = Snapshot.model_validate(record.content)
    return Reevaluation(
        snapshot=snapshot, metric_set_version=candidate.metric_set_version, attempt=attempt + 1
    )


@dataclass(frozen=True)
class _Pass:
    """One pass's inputs: where it reads, what it chose, its bound and back-off, its start."""

    store: Store
    choice: RetryChoice
    last_attempt: int
    admit: Admit | None
    now: datetime

    def retries(self, summary: RetrySummary) -> Iterator[Reevaluation]:
        for candidate in self.store.iter_retry_candidates(self.choice.query(self.now)):
            summary.examined += 1
            attempt = _retryable_attempt(candidate, self.last_attempt, summary)
            if attempt is None:
                continue
            if self.admit is not None and not self.admit(candidate):
                summary.not_due += 1
                continue
            retry = _next_attempt(self.store, candidate, attempt, summary)
            if retry is not None:
                yield retry


def retry_failed(
    store: Store,
    sender: RetrySender,
    choice: RetryChoice,
    *,
    batch_size: int = 1,
    last_attempt: int = MAX_ATTEMPTS,
    admit: Admit | None = None,
    now: datetime | None = None,
) -> RetrySummary:
    """Enqueue the next attempt of every newest attempt ``choice`` selects (see the module).

    ``last_attempt`` bounds the attempts (a candidate already at it is ``MAX_ATTEMPTS``);
    ``admit`` may leave a candidate for a later pass (counted ``not_due``); only evaluations
    recorded before ``now`` (default: the call's start) are listed. Store and broker
    errors propagate: what was sent before them stays sent, and re-running is harmless (the
    same attempt has the same evaluation id).
    """
    summary = RetrySummary()
    bound = min(last_attempt, MAX_ATTEMPTS)
    work = _Pass(store, choice, bound, admit, now or datetime.now(UTC))
    sent = sender.reevaluate_many(work.retries(summary), batch_size=batch_size)
    summary.enqueued = sent
    if sent:
        _log.info("retry: %d snapshot(s) re-enqueued (reasons %s)", sent, ",".join(choice.reasons))
    return summary


def due(policy_due_after_s: Callable[[int], float], now: datetime) -> Admit:
    """An :data:`Admit` of candidates whose back-off since their attempt has passed."""

    def admit(candidate: RetryCandidate) -> bool:
        attempt = candidate.attempt or 1
        return (now - candidate.created_at).total_seconds() >= policy_due_after_s(attempt)

    return admit
