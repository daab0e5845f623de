"""The :class:`Store` facade and :func:`open_store`.

Every public method is one transaction run by :meth:`Store._run`: the single place where driver
exceptions are translated and where transient failures are retried (stamina, bounded attempts
and time). Methods are synchronous and thread-safe; worker threads call them directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from types import TracebackType
from typing import TypeVar

import stamina

from ._backends import Backend, PostgresBackend, SqliteBackend, Tx, redacted
from ._batch import (
    EvaluationItem,
    PreparedBatch,
    existing_evaluation_ids,
    prepare_evaluations,
    write_evaluations,
)
from ._browse import (
    EvaluationLink,
    ResultFilter,
    ResultListRow,
    SnapshotIndex,
    SnapshotReview,
    VerdictCount,
    matching_snapshot_ids,
    result_list_page,
    snapshot_evaluations,
    snapshot_index,
    snapshot_review,
    verdict_counts,
)
from ._errors import PermanentStoreError, StoreCode, TransientStoreError, translating
from ._listing import ListedResult, ResultCursor, ResultQuery, listed_reasons, result_listing
from ._newest import RetryCandidate, RetryQuery, newest_evaluation_id, retry_candidate_page
from ._reads import (
    EvaluationRow,
    LinkedOutcome,
    MetricCounts,
    RecordScope,
    ResultCount,
    SendCounts,
    SnapshotLabels,
    VersionCounts,
    backfill_counts,
    count_evaluations_in,
    count_rows,
    count_snapshots_in,
    evaluation_page,
    labels_page,
    latest_checkpoint,
    latest_checkpoints,
    linked_outcome_page,
    links,
    metric_counts,
    metric_counts_in,
    open_dead_letter_counts,
    open_dead_letters,
    pending_criteria,
    result_counts_in,
    result_page,
    sampled_out_counts,
    sampling_weight_sum,
    send_counts,
    sends_of,
    snapshot,
    stored_evaluation,
    version_counts,
)
from ._records import (
    Checkpoint,
    DeadLetter,
    DeadLetterRecord,
    EvaluationRecord,
    OutcomeLink,
    OutcomeRecord,
    OutcomeWritten,
    PurgeSummary,
    ResultRow,
    SampledOutCount,
    SendRecord,
    SnapshotRecord,
    StoredEvaluation,
    StoredSnapshot,
    TallyRecord,
    Written,
    evaluation_id_for,
)
from ._schema import migrate, schema_is_current
from ._turns import Turn
from ._url import SETTING, PostgresTarget, parse_store_url
from ._writes import (
    write_checkpoint,
    write_dead_letter,
    write_evaluation,
    write_outcome,
    write_purge,
    write_redrive,
    write_sends,
    write_snapshot,
    write_tally,
)

__all__ = ["RETRY_TIMEOUT_S", "Store", "failure_line", "open_store", "store_location"]

T = TypeVar("T")


def _bulk_write(
    batch: PreparedBatch, sends: tuple[SendRecord, ...] = ()
) -> Callable[[Tx], list[Written]]:
    # Stamped inside the transaction, after the write lock is held, as record_evaluation does.
    def work(tx: Tx) -> list[Written]:
        now = _now()
        if sends:
            write_sends(tx, sends, now)
        return write_evaluations(tx, batch, now)

    return work


def _turn_of(urgent: bool) -> Turn:
    """A batch's turn: urgent (live records) or bulk."""
    return Turn.URGENT if urgent else Turn.BULK


def _now() -> datetime:
    return datetime.now(UTC)


RETRY_TIMEOUT_S = 30.0
"""How long the store retries a transient fault inside one call, by default (stamina's timeout)."""


def _retry_here(exc: BaseException) -> bool:
    """Transient errors worth retrying inside the call (a replaced file never comes back)."""
    return isinstance(exc, TransientStoreError) and exc.code != StoreCode.STORE_REPLACED


def _busy(exc: BaseException) -> bool:
    """A lock held by another process: the database is there, try again shortly."""
    return isinstance(exc, TransientStoreError) and exc.code == StoreCode.STORE_BUSY


class Store:
    """Append-only record store. Build it with :func:`open_store`."""

    def __init__(
        self, backend: Backend, *, retry_attempts: int = 5, retry_timeout_s: float = RETRY_TIMEOUT_S
    ) -> None:
        self._backend = backend
        self._retry_attempts = retry_attempts
        self._retry_timeout_s = retry_timeout_s

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._backend.dialect

    @property
    def location(self) -> str:
        """The SQLite file path, or the PostgreSQL URL without password (safe to print)."""
        return self._backend.location

    def _retrying(
        self, on: Callable[[BaseException], bool], *, opening: bool = False
    ) -> Iterable[stamina.Attempt]:
        """The store's one retry policy (stamina) for the errors ``on`` accepts. ``opening``
        (the probe, the schema) retries for at least :data:`RETRY_TIMEOUT_S`, whatever the
        store was given: the processes of one worker open it at once."""
        timeout_s = self._retry_timeout_s
        return stamina.retry_context(
            on=on,
            attempts=self._retry_attempts,
            timeout=max(timeout_s, RETRY_TIMEOUT_S) if opening else timeout_s,
            wait_initial=0.05,
            wait_max=2.0,
            wait_jitter=0.1,
        )

    def _run(
        self,
        work: Callable[[Tx], T],
        *,
        write: bool = True,
        turn: Turn = Turn.URGENT,
        opening: bool = False,
    ) -> T:
        for attempt in self._retrying(_retry_here, opening=opening):
            with attempt, translating(), self._backend.transaction(write=write, turn=turn) as tx:
                return work(tx)
        raise AssertionError("unreachable: stamina re-raises after the last attempt")

    # --- writes ----------------------------------------------------------------------------

    def probe(self) -> None:
        """Reach the database: ``STORE_UNAVAILABLE`` within the connect timeout, no retries.

        :func:`open_store` calls it first, so every command fails fast on an unreachable store.
        ``STORE_BUSY`` alone is retried like a write: the database answered, and another process
        holds its lock (processes of one worker opening a new SQLite file at once: switching it
        to WAL can be refused without SQLite's busy wait, seen in CI as a child failing to start).
        """
        for attempt in self._retrying(_busy, opening=True):
            with attempt, translating():
                self._backend.probe()

    def migrate(self) -> bool:
        """Create the schema if this version is not recorded yet; True if it was created.

        A current schema is recognised with reads only (no DDL rights needed). Otherwise the
        DDL runs; a role that may not run it gets ``SCHEMA_NOT_MIGRATED``: run
        ``evalq store migrate`` (this method) as the role that owns the tables.
        """
        dialect = self._backend.dialect
        try:
            return self._run(lambda tx: migrate(tx, dialect), turn=Turn.PLAIN, opening=True)
        except PermanentStoreError as exc:
            if exc.code != StoreCode.STORE_PERMISSION_DENIED:
                raise
            raise PermanentStoreError(
                StoreCode.SCHEMA_NOT_MIGRATED, "run evalq store migrate"
            ) from None

    def schema_is_current(self) -> bool:
        """Whether this version's schema is recorded (``SCHEMA_TOO_NEW`` if a newer one is)."""
        dialect = self._backend.dialect
        return self._run(lambda tx: schema_is_current(tx, dialect), write=False)

    def put_snapshot(self, record: StoredSnapshot) -> Written:
        """Insert the snapshot if absent."""
        now = _now()
        created = self._run(lambda tx: write_snapshot(tx, record, now))
        return Written(record.snapshot_id, created)

    def record_evaluation(
        self, record: EvaluationRecord, snapshot: StoredSnapshot | None = None
    ) -> Written:
        """Insert the evaluation, its results and criteria in one transaction, unless it exists.

        Passing ``snapshot`` records it in the same transaction (insert-if-absent); otherwise it
        must have been put before (``PermanentStoreError`` code ``UNKNOWN_SNAPSHOT``). A
        duplicate writes nothing and returns the existing id with ``created=False``.
        """
        if snapshot is not None and snapshot.snapshot_id != record.snapshot_id:
            raise ValueError("the snapshot passed is not the one the evaluation names")
        # Stamped inside the transaction (after the write lock is held), so created_at is when
        # the record was written, not when a writer started waiting for its turn.
        return self._run(lambda tx: write_evaluation(tx, record, snapshot, _now()))

    def record_evaluations(
        self,
        items: Sequence[EvaluationItem],
        urgent: bool = False,
        sends: Sequence[SendRecord] = (),
    ) -> list[Written]:
        """Record many ``(evaluation, snapshot or None)`` pairs, in input order.

        ``sends`` (as :meth:`record_sends`) are written in the first transaction, so a group
        commit records its messages' provenance without a transaction of its own.

        ``urgent`` (a group of live records) writes in the urgent writer turn on SQLite, ahead of
        waiting backfill batches; it changes nothing on PostgreSQL.

        Each pair behaves as in :meth:`record_evaluation` (a duplicate writes nothing and comes
        back ``created=False``). On PostgreSQL all pairs commit in one transaction. On SQLite they
        commit in transactions of ``SQLITE_BULK_ROWS`` (16; a backfill's 4 while live records
        are being written beside it), each a *bulk* writer turn that lets single-record writers
        (the live lane) go first: the one write lock is then never held long. A failure part-way
        leaves earlier transactions written, and the retry or redelivery finds them done
        (``created=False``), so nothing is written twice.
        """
        for record, content in items:
            if content is not None and content.snapshot_id != record.snapshot_id:
                raise ValueError("the snapshot passed is not the one the evaluation names")
        written: list[Written] = []
        pending = tuple(sends)
        if not items and pending:
            self._run(lambda tx: write_sends(tx, pending, _now()), turn=_turn_of(urgent))
        start = 0
        while start < len(items):
            size = self._backend.bulk_rows(urgent=urgent) or len(items)  # per part: live may start
            batch = prepare_evaluations(items[start : start + size])  # rows built before the lock
            written.extend(self._run(_bulk_write(batch, pending), turn=_turn_of(urgent)))
            pending = ()  # with the first transaction only
            start += size
        return written

    def record_outcome(self, outcome: OutcomeRecord) -> OutcomeWritten:
        """Insert the outcome if its event id is new and link it to its trace's evaluations.

        ``linked`` lists the evaluations this call linked; a re-sent event id links nothing.
        """
        now = _now()
        return self._run(lambda tx: write_outcome(tx, outcome, now))

    def record_dead_letter(self, record: DeadLetterRecord) -> str:
        """Insert a dead letter (payload bounded to 64 KiB) and return its id."""
        # The id is chosen once, outside the retries: a retry after an ambiguous commit then
        # finds its own row instead of adding a twin.
        dead_letter_id = uuid.uuid4().hex
        now = _now()
        return self._run(lambda tx: write_dead_letter(tx, dead_letter_id, record, now)).id

    def record_redrive(self, dead_letter_id: str) -> bool:
        """Mark a dead letter re-enqueued (a new row, never an update); False if it already was."""
        now = _now()
        return self._run(lambda tx: write_redrive(tx, dead_letter_id, now))

    def record_checkpoint(
        self, backfill_id: str, source: str, offset: int, enqueued: int
    ) -> Checkpoint:
        """Append a backfill checkpoint: ``source`` read up to ``offset``, ``enqueued`` sent."""
        checkpoint = Checkpoint(
            backfill_id=backfill_id,
            source=source,
            position=offset,
            enqueued=enqueued,
            recorded_at=_now(),
        )
        self._run(lambda tx: write_checkpoint(tx, checkpoint), turn=Turn.PLAIN)
        return checkpoint

    def record_tally(self, tally: TallyRecord) -> Written:
        """Insert a producer's sampling tally, each row once per (tally id, row).

        ``created`` is False when every row was already stored (a redelivered tally).
        """
        now = _now()
        written = self._run(lambda tx: write_tally(tx, tally, now), turn=Turn.PLAIN)
        return Written(tally.tally_id, created=written > 0)

    def record_sends(self, sends: Sequence[SendRecord]) -> int:
        """Append the sends (provenance of delivered snapshots) in one transaction.

        Insert-if-absent by :attr:`SendRecord.send_key` (message id, snapshot id): a redelivered
        message adds nothing. Returns the rows added.
        """
        if not sends:
            return 0
        now = _now()
        chosen = tuple(sends)
        return self._run(lambda tx: write_sends(tx, chosen, now))

    def purge_content(self, before: datetime) -> PurgeSummary:
        """Expire evaluated content older than ``before``; every record stays readable.

        Deletes the ``snapshot_contents`` of snapshots created before ``before``, empties the
        payload of dead letters received before it (their size and sha256 stay) and deletes the
        question texts that no snapshot created at or after it asked (their digests stay in
        every result's audit, so a record reads back with ``text=None``). The horizon is
        recorded first (``content_purges``), and the append-only triggers allow exactly these
        changes below the latest recorded horizon, nothing else. ``before`` must be
        timezone-aware and not in the future (``ValueError``). Run it as the tables' owner role.
        """
        if before.tzinfo is None:
            raise ValueError("before must be timezone-aware")
        now = _now()
        if before > now:
            raise ValueError("before must not be in the future")
        dialect = self._backend.dialect
        horizon = before.astimezone(UTC)
        return self._run(lambda tx: write_purge(tx, horizon, now, dialect), turn=Turn.PLAIN)

    # --- reads -----------------------------------------------------------------------------

    def get_snapshot(self, snapshot_id: str) -> SnapshotRecord | None:
        """The snapshot's content (hash re-verified; an id from before schema 4 is its whole-text
        hash, ``SnapshotRecord.legacy_id``), or None."""
        return self._run(lambda tx: snapshot(tx, snapshot_id), write=False)

    def get_evaluation(self, evaluation_id: str) -> StoredEvaluation | None:
        """The evaluation by id, or None."""
        return self._run(lambda tx: stored_evaluation(tx, evaluation_id), write=False)

    def find_evaluation(
        self, snapshot_id: str, metric_set_version: str, run: str = ""
    ) -> StoredEvaluation | None:
        """The evaluation of this snapshot under this metric-set version (and run), or None."""
        return self.get_evaluation(evaluation_id_for(snapshot_id, metric_set_version, run))

    def newest_evaluation(
        self, snapshot_id: str, metric_set_version: str
    ) -> StoredEvaluation | None:
        """The newest attempt of this snapshot under this metric-set version, or None.

        Attempt 1 unless a retry superseded it (``evalq retry``: ``run`` ``attempt:N``).
        """

        def read(tx: Tx) -> StoredEvaluation | None:
            evaluation_id = newest_evaluation_id(tx, snapshot_id, metric_set_version)
            return None if evaluation_id is None else stored_evaluation(tx, evaluation_id)

        return self._run(read, write=False)

    def retry_candidates(
        self, query: RetryQuery, *, after: int = 0, limit: int = 500
    ) -> tuple[tuple[RetryCandidate, ...], int | None]:
        """One page of newest attempts with a result of ``query.reasons`` (recording order),
        after the evaluation ``seq`` ``after``, and the next page's cursor (None: the last)."""
        fetch = partial(retry_candidate_page, query=query, after=after, limit=limit)
        return self._run(fetch, write=False)

    def iter_retry_candidates(
        self, query: RetryQuery, *, page_size: int = 500
    ) -> Iterator[RetryCandidate]:
        """Every page of :meth:`retry_candidates`, fetched in short read transactions."""
        cursor: int | None = 0
        while cursor is not None:
            page, cursor = self.retry_candidates(query, after=cursor, limit=page_size)
            yield from page

    def existing_evaluations(self, evaluation_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``evaluation_ids`` are recorded (one query per 500 ids): skip-if-done."""
        if not evaluation_ids:
            return frozenset()
        return self._run(lambda tx: existing_evaluation_ids(tx, evaluation_ids), write=False)

    def links_for_evaluation(self, evaluation_id: str) -> tuple[OutcomeLink, ...]:
        """Outcomes linked to the evaluation, in arrival order."""
        return self._run(lambda tx: links(tx, evaluation_id), write=False)

    def pending_outcomes(self, evaluation_id: str) -> tuple[str, ...]:
        """The evaluation's outcome criteria that no linked outcome has answered yet."""
        return self._run(lambda tx: pending_criteria(tx, evaluation_id), write=False)

    def open_dead_letters(
        self, reason: str | None = None, limit: int | None = None
    ) -> tuple[DeadLetter, ...]:
        """Dead letters without a redrive, oldest first, optionally of one reason code."""
        return self._run(lambda tx: open_dead_letters(tx, reason, limit), write=False)

    def latest_checkpoint(self, backfill_id: str, source: str) -> Checkpoint | None:
        """The most recent checkpoint of one backfill source, or None."""
        return self._run(lambda tx: latest_checkpoint(tx, backfill_id, source), write=False)

    def count_snapshots(self, scope: RecordScope | None = None) -> int:
        """Distinct snapshot ids recorded (in ``scope``: see :meth:`count_snapshots_in`)."""
        if scope is not None:
            return self._run(lambda tx: count_snapshots_in(tx, scope), write=False)
        return self._run(lambda tx: count_rows(tx, "snapshots"), write=False)

    def count_evaluations(self, scope: RecordScope | None = None) -> int:
        """Evaluation records (re-evaluations and re-runs included), optionally in ``scope``."""
        if scope is not None:
            return self._run(lambda tx: count_evaluations_in(tx, scope), write=False)
        return self._run(lambda tx: count_rows(tx, "evaluations"), write=False)

    def metric_counts(self, scope: RecordScope | None = None) -> MetricCounts:
        """``{metric_id: {"by_status": {status: n}, "by_reason": {reason: n}}}``.

        With ``scope``, only results of evaluations in it (e.g. ``RecordScope(since=...)``).
        """
        if scope is not None:
            return self._run(lambda tx: metric_counts_in(tx, scope), write=False)
        return self._run(metric_counts, write=False)

    def iter_results(
        self,
        *,
        metric_set_version: str | None = None,
        page_size: int = 500,
        scope: RecordScope | None = None,
    ) -> Iterator[ResultRow]:
        """Every metric result in recording order, fetched in short read transactions."""
        cursor: tuple[int, int] | None = (0, -1)
        while cursor is not None:
            fetch = partial(
                result_page,
                after=cursor,
                metric_set_version=metric_set_version,
                limit=page_size,
                scope=scope,
            )
            page, cursor = self._run(fetch, write=False)
            yield from page

    def iter_evaluation_rows(
        self, scope: RecordScope | None = None, *, page_size: int = 500
    ) -> Iterator[EvaluationRow]:
        """Evaluations in recording order with their snapshot's slice and sampling facts."""
        cursor: int | None = 0
        while cursor is not None:
            fetch = partial(evaluation_page, after=cursor, scope=scope, limit=page_size)
            page, cursor = self._run(fetch, write=False)
            yield from page

    def iter_snapshot_labels(
        self, scope: RecordScope | None = None, *, page_size: int = 500
    ) -> Iterator[SnapshotLabels]:
        """Gold labels of the snapshots that carry any and have an evaluation in ``scope``."""
        cursor: str | None = ""
        dialect = self._backend.dialect
        while cursor is not None:
            fetch = partial(
                labels_page, dialect=dialect, after=cursor, scope=scope, limit=page_size
            )
            page, cursor = self._run(fetch, write=False)
            yield from page

    def iter_linked_outcomes(
        self, scope: RecordScope | None = None, *, page_size: int = 500
    ) -> Iterator[LinkedOutcome]:
        """Outcomes linked to the evaluations in ``scope`` (evaluation order, then arrival)."""
        cursor: tuple[int, int] | None = (0, 0)
        while cursor is not None:
            fetch = partial(linked_outcome_page, after=cursor, scope=scope, limit=page_size)
            page, cursor = self._run(fetch, write=False)
            yield from page

    def list_results(
        self, query: ResultQuery
    ) -> tuple[tuple[ListedResult, ...], ResultCursor | None]:
        """One page of results, newest first, and the next page's cursor (None: the last)."""
        return self._run(lambda tx: result_listing(tx, query), write=False)

    def recorded_reasons(self, limit: int = 1000) -> tuple[str, ...]:
        """Distinct reason codes of recorded results, sorted (at most ``limit``: codes are a
        small set, the limit only bounds a store whose reasons are not codes)."""
        return self._run(lambda tx: listed_reasons(tx, limit), write=False)

    def result_counts(self, scope: RecordScope | None = None) -> tuple[ResultCount, ...]:
        """Metric results per (metric id, status, reason), optionally in ``scope``."""
        return self._run(lambda tx: result_counts_in(tx, scope), write=False)

    def sampling_weight_sum(self, scope: RecordScope | None = None) -> tuple[int, float]:
        """(evaluations, sum of their snapshots' sampling weights), optionally in ``scope``."""
        return self._run(lambda tx: sampling_weight_sum(tx, scope), write=False)

    def version_counts(self, scope: RecordScope | None = None) -> tuple[VersionCounts, ...]:
        """Per metric-set version: evaluations in ``scope`` and how many are each unit's newest
        (the rest are superseded by a re-evaluation); ``scope.newest`` is ignored."""
        return self._run(lambda tx: version_counts(tx, scope), write=False)

    def send_counts(self, scope: RecordScope | None = None) -> SendCounts:
        """Sends of the snapshots evaluated in ``scope``, and how many snapshots they deliver."""
        return self._run(lambda tx: send_counts(tx, scope), write=False)

    def sends(self, snapshot_id: str) -> tuple[SendRecord, ...]:
        """Every recorded send of one snapshot (lane, sampling, rule, source), oldest first."""
        return self._run(lambda tx: sends_of(tx, snapshot_id), write=False)

    def open_dead_letter_counts(self) -> dict[str, int]:
        """``{reason: n}`` of dead letters without a redrive."""
        return self._run(open_dead_letter_counts, write=False)

    def latest_checkpoints(self) -> tuple[Checkpoint, ...]:
        """The latest checkpoint of every (backfill id, source)."""
        return self._run(latest_checkpoints, write=False)

    def sampled_out_counts(
        self,
        *,
        lane: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> tuple[SampledOutCount, ...]:
        """Seen / sampled / sampled-out totals per (rule, rate, lane, slice) from the tallies.

        ``since``/``until`` bound the tallies' end time (inclusive / exclusive).
        """
        fetch = partial(sampled_out_counts, lane=lane, since=since, until=until)
        return self._run(fetch, write=False)

    def backfill_counts(self, backfill_id: str) -> tuple[int, int]:
        """(snapshots of the backfill evaluated, of those how many have an ERROR result).

        A backfill's snapshots are those with a send whose rule is ``backfill:<id>`` (or
        ``…/<rule>``), so units evaluated before (sent live, another backfill) count too.
        """
        dialect = self._backend.dialect
        return self._run(lambda tx: backfill_counts(tx, backfill_id, dialect), write=False)

    # --- the result browser (evalq ui): bounded reads ------------------------------------

    def result_list(
        self,
        chosen: ResultFilter,
        scope: RecordScope | None = None,
        *,
        before: int | None = None,
        limit: int = 50,
    ) -> tuple[tuple[ResultListRow, ...], int | None]:
        """One page of one metric's results, newest first, and the next page's cursor."""
        fetch = partial(result_list_page, chosen=chosen, scope=scope, before=before, limit=limit)
        return self._run(fetch, write=False)

    def verdict_counts(self, scope: RecordScope | None = None) -> tuple[VerdictCount, ...]:
        """Results per (metric id, status, reason, passed), optionally in ``scope``."""
        return self._run(lambda tx: verdict_counts(tx, scope), write=False)

    def snapshot_index(self, snapshot_id: str) -> SnapshotIndex | None:
        """A snapshot's indexed columns (and whether its content is kept), or None."""
        return self._run(lambda tx: snapshot_index(tx, snapshot_id), write=False)

    def snapshot_evaluations(
        self, snapshot_id: str, limit: int = 100
    ) -> tuple[EvaluationLink, ...]:
        """Up to ``limit`` evaluations of one snapshot, oldest first."""
        return self._run(lambda tx: snapshot_evaluations(tx, snapshot_id, limit), write=False)

    def snapshot_review(self, snapshot_id: str, limit: int = 100) -> SnapshotReview | None:
        """A snapshot's evaluations, whole (results, audits, outcomes), in one read; or None.

        Up to ``limit`` evaluations, oldest first (``more`` says whether there were others).
        Readable after any purge: the content is not read, and an expired question text comes
        back as ``None`` beside its digest.
        """
        return self._run(lambda tx: snapshot_review(tx, snapshot_id, limit), write=False)

    def snapshot_ids_with_prefix(self, prefix: str, limit: int = 2) -> tuple[str, ...]:
        """Up to ``limit`` snapshot ids starting with ``prefix`` (at least 8 lower-case hex
        digits, else ``ValueError``), in id order: one match means the prefix is unambiguous."""
        return self._run(lambda tx: matching_snapshot_ids(tx, prefix, limit), write=False)

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close this process's connections."""
        self._backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_store(
    url: str,
    *,
    migrate: bool = True,
    pool_max_size: int = 4,
    busy_timeout_s: float = 5.0,
    connect_timeout_s: float = 3.0,
    lock_timeout_s: float = 10.0,
    retry_attempts: int = 5,
    retry_timeout_s: float = RETRY_TIMEOUT_S,
) -> Store:
    """Open the store at ``url`` (``EVALQ_STORE_URL``) and create its schema if needed.

    ``sqlite:///relative.db`` and ``sqlite:////absolute/path.db`` open a SQLite file (WAL);
    ``postgresql://…`` (or ``postgres://…``) a psycopg pool of at most ``pool_max_size``
    connections per process. Anything else raises ``ValueError`` naming ``EVALQ_STORE_URL``.
    Connections open lazily and again after a fork, so opening before forking is safe.

    The database is reached once first (:meth:`Store.probe`, no retries): an unreachable store
    raises ``TransientStoreError(StoreCode.STORE_UNAVAILABLE)`` within ``connect_timeout_s`` (libpq
    rounds it up to whole seconds, at least 2). ``migrate=True`` then creates or upgrades the
    schema unless it is current (:meth:`Store.migrate`).

    ``retry_timeout_s`` bounds how long one call retries a transient fault (stamina, 50 ms
    doubling, at most ``retry_attempts``); opening (a busy database, the schema) retries for at
    least :data:`RETRY_TIMEOUT_S` whatever it is. A caller with its own outage policy (the
    worker's hold) passes a short one.
    """
    target = parse_store_url(url)
    backend: Backend
    if isinstance(target, PostgresTarget):
        backend = PostgresBackend(
            target.conninfo,
            pool_max_size=pool_max_size,
            connect_timeout_s=connect_timeout_s,
            lock_timeout_s=lock_timeout_s,
        )
    else:
        backend = SqliteBackend(target.path, busy_timeout_s=busy_timeout_s)
    store = Store(backend, retry_attempts=retry_attempts, retry_timeout_s=retry_timeout_s)
    try:
        store.probe()
        if migrate:
            store.migrate()
    except BaseException:
        store.close()
        raise
    return store


def store_location(url: str) -> str:
    """Where ``url`` points, safe to print: the absolute SQLite path or the URL sans password."""
    target = parse_store_url(url)
    if isinstance(target, PostgresTarget):
        return redacted(target.conninfo)
    return str(target.path.resolve())


def failure_line(url: str, code: str) -> str:
    """The one line every command prints when the store fails: ``EVALQ_STORE_URL: … (CODE)``."""
    try:
        where = store_location(url)
    except ValueError:
        return f"{SETTING}: the store URL is invalid ({code})"
    problem = "is unreachable" if code == StoreCode.STORE_UNAVAILABLE else "cannot be used"
    return f"{SETTING}: {where} {problem} ({code})"
