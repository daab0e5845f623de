"""Group commit: evaluation records that finish close together share one store transaction.

The committer runs on the runtime's loop and writes on a store thread, one transaction at a time.
While a transaction runs, records that finish meanwhile wait; the next transaction takes them
all (at most :data:`GROUP_ROWS`), live records first and in a group of their own, so a live
record waits behind at most one bounded transaction and is written in SQLite's urgent writer
turn. A live record is written at once when the committer is idle (a group of one): an idle
worker adds no batching delay to the live lane. A group of other records (backfill,
re-evaluations) smaller than :data:`GATHER_ROWS` first waits up to :data:`GATHER_S` for more to
join it; a live record or a full group ends the wait at once. Why: at a 100 ms judge a
backfill's evaluations finish a few at a time, and writing whatever had finished made groups of
~9 records where a zero-latency judge makes ~55; each group costs a transaction, a thread hop,
its messages' ack round trip and a wake-up of every thread on the way. Alternating drains of
the backfill lane at C = 64, L = 100 ms (SQLite) read 3.45-3.61 ms of CPU per evaluation with
the wait against 3.65-4.51 without, 0.86-0.96 of X0 against 0.72-0.82 (docs/concurrency.md,
"Eighteenth round"); the backfill's records reach the store at most 20 ms later.

Every write's future resolves only after its transaction committed; the handler acks a message
only when the futures of all its records are resolved.

A message's *sends* (its provenance rows) ride with its first evaluation record into that
record's transaction; a message whose snapshots were all evaluated before hands its sends over
alone (:meth:`Committer.send`), and they join the next group. Before, a transaction of their own
per message doubled the transactions on the live lane: in-process, 1.1 → 2.2 ms of CPU per
snapshot (docs/concurrency.md).

Store trouble:

- transient (connection lost, disk full, locked: :class:`~worker.store.TransientStoreError`) →
  the committer holds the group and retries with back-off (stamina, for at most
  ``EVALQ_STORE_HOLD_S``, default :data:`HOLD_MAX_S`; each attempt's own retries inside the
  store end after :data:`~worker.runtime.STORE_CALL_RETRY_S`, so they do not stack under the
  hold). Meanwhile nothing else is written, the messages stay unacked, the prefetch slots fill
  and the worker stops fetching: no hot requeue loop. Past the bound the process halts
  (:mod:`worker.halt`: one log line with the code, a warm shutdown, exit status 75); the writes
  fail and their messages are requeued, never acked.
  A skip-if-done read failing for that long halts it too.
- ``STORE_REPLACED`` (the SQLite file was deleted or replaced: it never comes back in this
  process) → no hold: the process halts at once.
- once halted, every write fails at once with the halt's code (nothing more is acked).
- permanent for the group (:class:`~worker.store.PermanentStoreError`, or an unexpected error:
  a bug) → the group's records are written one by one, so only the offending record fails (the
  handler then keeps its snapshot as a ``RECORD_REFUSED`` or ``INTERNAL_ERROR`` dead letter and
  acks its message: requeued, it would be evaluated and refused again for ever).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import stamina

from worker.runtime import Runtime
from worker.store import (
    SQLITE_BULK_ROWS,
    EvaluationRecord,
    SendRecord,
    SnapshotText,
    StoreCode,
    StoreError,
    TransientStoreError,
    Written,
)

__all__ = ["GATHER_ROWS", "GATHER_S", "GROUP_ROWS", "HOLD_MAX_S", "Committer"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
GROUP_ROWS = 64
"""Most evaluations one transaction holds (bounds how long a live record can wait behind one)."""
GATHER_ROWS = SQLITE_BULK_ROWS
"""A group of non-live records this large (SQLite's transaction size for a backfill) is written
without waiting for more."""
GATHER_S = 0.02
"""How long a smaller group of non-live records waits for more before it is written."""
HOLD_MAX_S = 60.0
"""Default of ``EVALQ_STORE_HOLD_S``: how long a transient store failure is retried with
back-off before the process halts."""
_REPLACED = StoreCode.STORE_REPLACED


@dataclass
class _Pending:
    record: EvaluationRecord | None  # None: sends only
    content: SnapshotText | None
    urgent: bool
    written: asyncio.Future[Written | None]
    sends: tuple[SendRecord, ...] = ()


class Committer:
    """The group-commit writer of one worker process (see the module docstring)."""

    def __init__(
        self, rt: Runtime, *, group_rows: int = GROUP_ROWS, gather_s: float = GATHER_S
    ) -> None:
        self.rt = rt
        self.group_rows = group_rows
        self.gather_s = gather_s
        self.hold_max_s = rt.settings.store_hold_s
        self._trouble_since_s: float | None = None  # first read failure of the current outage
        self._pending: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self._gathered: asyncio.Event | None = None  # while a group gathers: set to end the wait
        self._serial = asyncio.Lock()  # one store transaction of this committer at a time

    async def write(
        self,
        record: EvaluationRecord,
        content: SnapshotText | None,
        *,
        urgent: bool,
        sends: tuple[SendRecord, ...] = (),
    ) -> Written:
        """Record one evaluation (and ``sends``) in the next group; returns once committed."""
        written = await self._queue(_Pending(record, content, urgent, self._future(), sends))
        assert written is not None  # an evaluation's pending always gets its Written
        return written

    async def send(self, sends: tuple[SendRecord, ...], *, urgent: bool) -> None:
        """Record sends alone in the next group; returns once their transaction committed."""
        await self._queue(_Pending(None, None, urgent, self._future(), sends))

    def _future(self) -> asyncio.Future[Written | None]:
        return self.rt.loop.create_future()

    async def _queue(self, pending: _Pending) -> Written | None:
        self._pending.append(pending)
        if self._gathered is not None and self._ready():
            self._gathered.set()
        if self._writer is None or self._writer.done():
            self._writer = self.rt.loop.create_task(self._drain())
        return await pending.written

    async def call(self, work: Callable[..., _T], *args: Any) -> _T:
        """Run one other store call (a dead letter, an outcome) with the same back-off."""
        return await self._held(lambda: self.rt.in_store_thread(work, *args))

    async def idle(self) -> None:
        """Wait until every record handed over so far is written (shutdown, tests)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    # -- the writer -----------------------------------------------------------------------------

    async def _drain(self) -> None:
        while self._pending:
            await self._gather()
            group = self._take()
            try:
                await self._commit(group)
            except Exception as exc:  # noqa: BLE001 - every future gets an answer, whatever broke
                for pending in group:
                    _fail(pending.written, exc)

    async def _gather(self) -> None:
        """Let a small group of non-live records wait for more (see the module docstring)."""
        if self.gather_s <= 0 or self._ready():
            return
        self._gathered = asyncio.Event()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.gather_s):
                    await self._gathered.wait()
        finally:
            self._gathered = None

    def _ready(self) -> bool:
        """Whether the next group should be written now: it is live, or it is large enough."""
        return len(self._pending) >= GATHER_ROWS or any(p.urgent for p in self._pending)

    def _take(self) -> list[_Pending]:
        """The next group: urgent records first and alone, at most ``group_rows``."""
        urgent = [p for p in self._pending if p.urgent]
        chosen = (urgent or self._pending)[: self.group_rows]
        taken = {id(p) for p in chosen}
        self._pending = [p for p in self._pending if id(p) not in taken]
        return chosen

    async def _commit(self, group: list[_Pending]) -> None:
        records, items = _evaluations(group)
        sends = tuple(s for p in group for s in p.sends)
        urgent = group[0].urgent
        store = self.rt.store
        try:
            written = await self._held(
                lambda: self.rt.in_store_thread(store.record_evaluations, items, urgent, sends)
            )
        except TransientStoreError:
            raise  # held past the bound, or a halt: every record of the group fails with it
        except Exception:  # noqa: BLE001 - refused for good or a bug: find the record(s) it was
            await self._one_by_one(group)
            return
        results = dict(zip(map(id, records), written, strict=True))
        for pending in group:
            if not pending.written.done():
                pending.written.set_result(results.get(id(pending)))

    async def _one_by_one(self, group: list[_Pending]) -> None:
        for pending in group:
            try:
                result = await self._held(lambda p=pending: self._write_one(p))  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - this record alone fails (its handler decides)
                _fail(pending.written, exc)
            else:
                if not pending.written.done():
                    pending.written.set_result(result)

    async def _write_one(self, pending: _Pending) -> Written | None:
        """One pending on its own (after a group failed permanently)."""
        store = self.rt.store
        if pending.sends:
            await self.rt.in_store_thread(store.record_sends, pending.sends)
        if pending.record is None:
            return None
        return await self.rt.in_store_thread(
            store.record_evaluation, pending.record, pending.content
        )

    async def _held(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """``attempt`` under the committer's lock, retried with back-off on transient errors."""
        async with self._serial:
            try:
                return await self._retried(attempt)
            except TransientStoreError as exc:
                self._halt(exc, f"the store stayed unavailable past the {self.hold_max_s:g} s hold")
                raise

    async def _retried(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        async for retry in stamina.retry_context(
            on=self._worth_holding,
            attempts=None,
            timeout=self.hold_max_s,
            wait_initial=0.5,
            wait_max=10.0,
        ):
            with retry:
                halted = self.rt.halt.reason
                if halted is not None:  # nothing more is written, hence acked
                    raise TransientStoreError(halted, "the worker halted")
                try:
                    return await attempt()
                except TransientStoreError as exc:
                    if self._worth_holding(exc):  # a replaced file is never held: it halts
                        _log.warning("store unavailable (%s); holding the writes", exc.code)
                    raise
        raise AssertionError("unreachable: stamina either returns or raises")

    def _worth_holding(self, exc: BaseException) -> bool:
        return (
            isinstance(exc, TransientStoreError)
            and exc.code != _REPLACED
            and self.rt.halt.reason is None
        )

    def _halt(self, exc: TransientStoreError, why: str) -> None:
        if exc.code == _REPLACED:
            why = "the database file was deleted or replaced under this process"
        self.rt.halt.stop(exc.code, why)

    # -- reads ----------------------------------------------------------------------------------

    def read_failed(self, exc: StoreError, started_s: float) -> None:
        """A store read of the message path, begun at ``started_s`` (monotonic), failed: halt
        if the outage, counted from the first failing read's start, outlasted the hold."""
        if not isinstance(exc, TransientStoreError):
            return
        if self._trouble_since_s is None:
            self._trouble_since_s = started_s
        if exc.code == _REPLACED or time.monotonic() - self._trouble_since_s >= self.hold_max_s:
            self._halt(exc, f"store reads failed for more than {self.hold_max_s:g} s")

    def read_ok(self) -> None:
        """A store read of the message path succeeded: any outage is over."""
        self._trouble_since_s = None


def _evaluations(
    group: list[_Pending],
) -> tuple[list[_Pending], list[tuple[EvaluationRecord, SnapshotText | None]]]:
    """The group's pendings that hold an evaluation, and their (record, content) items."""
    records = [p for p in group if p.record is not None]
    return records, [(p.record, p.content) for p in records if p.record is not None]


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
