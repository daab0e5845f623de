"""Backfill: stream historical trace files onto the backfill lane, resumably, at a bounded pace.

``run_backfill(paths, send, store)`` reads JSONL/JSON/OTLP files (or directories of them) with
:func:`producer._reader.read_located` — one record at a time, so memory does not grow with the
input — stamps each snapshot for the backfill, and hands ``send`` batches of ``batch_size``
snapshots (``Producer.send_many(batch, lane=Lane.BACKFILL, batch_size=per_message)`` packs
them into few messages over one connection).

Choices, and why:

- **Backfill id.** Deterministic from the resolved input paths and the options that change
  snapshot content (format, unit, metric set, sampler), unless given. Every snapshot records
  ``Sampling(lane=backfill, rule="backfill:<id>")``: provenance, not part of the snapshot id,
  so re-running a backfill, another backfill id or a live send of the same unit all give the same
  content-addressed id, and the worker's idempotency evaluates it once. The worker records each
  send (``sends``: lane, rule, rate), so the store can still count what one backfill sent and
  got evaluated — units evaluated before it (sent live first) included.
- **Checkpoints.** After each batch is sent, ``store.record_checkpoint(id, source, position,
  enqueued)`` appends how far that file got. ``position`` is the ordinal of snapshots read from
  the file, not a line number: one line can hold several snapshots (``tool_call`` units, arrays)
  and group formats (OTLP) emit traces only when they close, so only the ordinal is exact. A
  finished file gets a ``complete:<path>`` checkpoint and is not even re-read on resume.
  ``resume=ID`` re-reads an unfinished file and skips (without sending) what was already sent;
  at worst the batch in flight at an interruption is sent twice, which idempotency absorbs.
  As a file is started its :func:`file_fingerprint` (size, mtime, a digest of its first MiB) is
  recorded too; a resume refuses, before sending anything, a started file that changed since
  (lines prepended would otherwise be skipped silently).
- **Inputs** must be regular files (a backfill re-reads them to resume): a FIFO or device is
  refused up front with :class:`BackfillInputError`.
- **Back-pressure.** Before each batch, while ``queue_depth()`` (messages waiting, e.g.
  :class:`RedisQueueDepth`) is at or above ``max_queue_depth``, the pump waits: Redis holds every
  queued message in memory (~1-1.4 KB each), and the broker is not a database.
- **Rate limit.** ``rate_limit_per_s`` paces snapshots (not messages) with a simple schedule.
- **Transient send failures** retry with stamina (bounded); then :class:`BackfillError` is raised
  with the id to resume from — nothing after the last checkpoint is assumed sent.
- **Invalid input** is reported by the reader (file, line, field, reason code) in an
  :class:`~producer._reader.ImportErrorReport`; the rest of the file is processed and the
  summary counts rejected lines. Nothing is silently dropped.
- **Stopping.** ``should_stop(progress)`` is asked before a batch is sent and after its
  checkpoint. A stop asked for while a batch was being read ends the run at the last checkpoint
  without sending that batch, and the report forgets what it recorded since that checkpoint:
  the resume reads those lines again and decides them there. Why: a signal handler's raise that
  C code swallows (pydantic's validation calls back into Python) turns a valid line into a
  rejection; sending the rest of the batch and checkpointing past it would lose that line for
  good. A stopped run's report holds only the lines its checkpoints cover.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis
import stamina
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from worker.canonical_json import canonical_json

from ._broker import Broker
from ._reader import ImportErrorReport, RejectedLine, read_located
from ._sampling import Sampler, replace_fields
from .snapshot import MAX_ITEM_BYTES, Lane, OutcomeEvent, Sampling, Snapshot

__all__ = [
    "COMPLETE_PREFIX",
    "EVENT_ID_CONFLICT",
    "FINGERPRINT_PREFIX",
    "TRACE_SUFFIXES",
    "BackfillError",
    "BackfillInputError",
    "BackfillProgress",
    "BackfillRetry",
    "BackfillStore",
    "BackfillSummary",
    "OutcomeSummary",
    "RedisQueueDepth",
    "backfill_id_for",
    "backfill_rule",
    "dead_lettered",
    "expand_paths",
    "file_fingerprint",
    "outcome_digest",
    "outcome_problem",
    "rich_progress",
    "run_backfill",
    "send_outcomes",
    "store_counts",
]

TRACE_SUFFIXES = (".jsonl", ".ndjson", ".json")
COMPLETE_PREFIX = "complete:"
"""Checkpoint source marking a finished file (sources are absolute paths, so no clash)."""
FINGERPRINT_PREFIX = "fingerprint:"
"""Checkpoint source holding a file's :func:`file_fingerprint` when the backfill started it."""
FINGERPRINT_BYTES = 1024 * 1024
DEAD_LETTER_SCAN_S = 30.0
"""Shortest interval between two scans of the open dead letters for one backfill's items."""

SendBatch = Callable[[Sequence[Snapshot]], object]
EvaluatedCounts = Callable[[str], "tuple[int, int] | None"]
_NOT_RETRIED = (TypeError, ValueError)


# --- store and progress types --------------------------------------------------------------------


class _Checkpoint(Protocol):
    @property
    def position(self) -> int: ...

    @property
    def enqueued(self) -> int: ...


class BackfillStore(Protocol):
    """The part of :class:`worker.store.Store` a backfill uses (checkpoints only)."""

    def record_checkpoint(
        self, backfill_id: str, source: str, offset: int, enqueued: int
    ) -> object: ...

    def latest_checkpoint(self, backfill_id: str, source: str) -> _Checkpoint | None: ...


@dataclass(frozen=True)
class BackfillProgress:
    """Counts so far. ``read`` includes ``skipped`` (sent by an earlier run of the same id).

    ``evaluated``/``failed`` are read back from the store (``None`` when it cannot say);
    ``queue_depth`` is the last depth seen, ``waiting`` true while back-pressure holds the pump.
    """

    backfill_id: str
    files_total: int
    files_done: int = 0
    source: str | None = None
    read: int = 0
    skipped: int = 0
    enqueued: int = 0
    sampled_out: int = 0
    rejected: int = 0
    not_ready: int = 0
    batches: int = 0
    evaluated: int | None = None
    failed: int | None = None
    queue_depth: int | None = None
    waiting: bool = False


@dataclass(frozen=True)
class BackfillSummary:
    """The outcome of one run: final counts, whether a stop hook ended it, rejected examples."""

    progress: BackfillProgress
    stopped: bool
    rejected_examples: tuple[RejectedLine, ...]

    @property
    def backfill_id(self) -> str:
        """The id to pass to ``resume``."""
        return self.progress.backfill_id


class BackfillError(RuntimeError):
    """The run could not continue (``code``, e.g. ``SEND_FAILED``); resume from ``progress``."""

    def __init__(self, code: str, progress: BackfillProgress) -> None:
        super().__init__(f"{code}: resume with backfill id {progress.backfill_id}")
        self.code = code
        self.progress = progress


# --- inputs and identity -------------------------------------------------------------------------


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(root).parts)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Absolute files in order: files as given, directories expanded (sorted, recursive).

    Directory members must end in :data:`TRACE_SUFFIXES`; hidden files and folders are skipped.
    A missing path raises ``FileNotFoundError`` before anything is sent.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw).resolve()
        if path.is_dir():
            members = (p for p in path.rglob("*") if p.is_file() and _visible(p, path))
            found.update(dict.fromkeys(sorted(p for p in members if _is_trace_file(p))))
        elif path.is_file():
            found[path] = None
        elif path.exists():
            raise BackfillInputError(
                f"backfill input is not a regular file (a FIFO, device or socket): {path}; a "
                "backfill re-reads its files to resume, so it needs files: save the stream to a "
                "file, or send it once with `evalq enqueue --lane backfill`"
            )
        else:
            raise FileNotFoundError(f"backfill input not found: {path}")
    return list(found)


class BackfillInputError(ValueError):
    """An input a backfill cannot use: not a regular file, or changed since it was read."""


def file_fingerprint(path: Path) -> tuple[int, int]:
    """(digest, size) of a file: size, mtime and its first :data:`FINGERPRINT_BYTES`.

    The digest is the first 60 bits of a sha256, an integer, so it fits a checkpoint's
    ``position`` column (the store needs no new table); ``enqueued`` holds the size.
    """
    stat = path.stat()
    digest = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}:".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(FINGERPRINT_BYTES))
    return int(digest.hexdigest()[:15], 16), stat.st_size


def _is_trace_file(path: Path) -> bool:
    return path.suffix.lower() in TRACE_SUFFIXES


def _sampler_config(sampler: Sampler | None) -> Any:
    if sampler is None:
        return None
    rules = [rule.model_dump(mode="json") for rule in (*sampler.rules, sampler.default)]
    return {"rules": rules}


def backfill_id_for(
    sources: Sequence[Path],
    *,
    format: str = "auto",  # noqa: A002 - mirrors read_snapshots
    unit: str = "invocation",
    metric_set: str | None = None,
    sampler: Sampler | None = None,
) -> str:
    """``bf-`` + 20 hex of sha256 over the inputs and content-changing options."""
    spec = {
        "paths": [str(p) for p in sources],
        "format": format,
        "unit": unit,
        "metric_set": metric_set,
        "sampler": _sampler_config(sampler),
    }
    return "bf-" + hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:20]


def backfill_rule(backfill_id: str) -> str:
    """The ``Sampling.rule`` of this backfill's snapshots (a sampler's rule follows a ``/``)."""
    return f"backfill:{backfill_id}"


# --- back-pressure, pacing, retries --------------------------------------------------------------


class RedisQueueDepth:
    """Messages waiting in a kombu queue on Redis: the sum of LLEN over the queue and its
    priority sub-lists (``q``, ``q\\x06\\x163``, ``q\\x06\\x166``, ``q\\x06\\x169`` by default).

    ``include_unacked`` adds ``HLEN unacked`` (messages delivered but not acked, all queues).
    Adapt ``priority_steps``/``sep``/``key_prefix`` if the broker transport options change them.
    """

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        priority_steps: Sequence[int] = (0, 3, 6, 9),
        sep: str = "\x06\x16",
        key_prefix: str = "",
        include_unacked: bool = False,
    ) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._broker = Broker.of(url)
        names = [queue if step == 0 else f"{queue}{sep}{step}" for step in priority_steps]
        self.keys = tuple(key_prefix + name for name in names)
        self._unacked = key_prefix + "unacked" if include_unacked else None

    def __call__(self) -> int:
        """Current depth in messages (one pipelined round trip); :class:`BrokerError` if Redis
        does not answer."""
        pipe = self._client.pipeline(transaction=False)
        for key in self.keys:
            pipe.llen(key)
        if self._unacked is not None:
            pipe.hlen(self._unacked)
        with self._broker.translating():
            return sum(int(n) for n in pipe.execute())

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()


class _Pacer:
    """At most ``rate_per_s`` items per second on average, without bursts above one batch."""

    def __init__(self, rate_per_s: float | None) -> None:
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError("rate_limit_per_s must be positive")
        self.rate_per_s = rate_per_s
        self._next_at = time.monotonic()

    def wait(self, items: int) -> None:
        if self.rate_per_s is None:
            return
        now = time.monotonic()
        if self._next_at > now:
            time.sleep(self._next_at - now)
        self._next_at = max(now, self._next_at) + items / self.rate_per_s


@dataclass(frozen=True)
class BackfillRetry:
    """Bounded retries of one batch send (or depth read) before the backfill gives up."""

    attempts: int = 6
    timeout_s: float = 120.0
    wait_initial_s: float = 0.5
    wait_max_s: float = 10.0


def _transient(exc: BaseException) -> bool:
    return not isinstance(exc, _NOT_RETRIED)


def _retrying(call: Callable[[], Any], policy: BackfillRetry) -> Any:
    for attempt in stamina.retry_context(
        on=_transient,
        attempts=policy.attempts,
        timeout=policy.timeout_s,
        wait_initial=policy.wait_initial_s,
        wait_max=policy.wait_max_s,
    ):
        with attempt:
            return call()
    raise AssertionError("unreachable: stamina re-raises the last error")  # pragma: no cover


# --- evaluated read-back -------------------------------------------------------------------------


def dead_lettered(store: object, backfill_id: str) -> int:
    """Snapshots of this backfill in open dead letters (``store.open_dead_letters``), or 0.

    Every snapshot carries its backfill's sampling rule, so its occurrences in a payload count
    the backfill's items in it (also in the kept head of a truncated payload; an item cut off
    before its rule is not counted).
    """
    letters = getattr(store, "open_dead_letters", None)
    if not callable(letters):
        return 0
    rule = re.compile(rb'"rule":\s*"' + re.escape(backfill_rule(backfill_id).encode()) + rb'["/]')
    return sum(len(rule.findall(bytes(dead.payload))) for dead in letters())


def store_counts(store: object) -> EvaluatedCounts | None:
    """Read-back of (evaluated, failed) for a backfill id from a store that can count them.

    Uses ``store.backfill_counts(backfill_id) -> (evaluated, failed)`` when the store has it;
    ``None`` otherwise (the progress bar then shows ``?`` for both). ``failed`` counts the
    evaluations with an ERROR result plus the backfill's snapshots in open dead letters (a
    message a worker refused, e.g. ``BATCH_TOO_LARGE``, is a failure, not silence).
    """
    counts = getattr(store, "backfill_counts", None)
    if not callable(counts):
        return None
    # Scanning dead letters reads their payloads: at most every DEAD_LETTER_SCAN_S per id.
    scanned: dict[str, tuple[float, int]] = {}

    def read(backfill_id: str) -> tuple[int, int] | None:
        evaluated, failed = counts(backfill_id)
        now = time.monotonic()
        at, dead = scanned.get(backfill_id, (-math.inf, 0))
        if now - at >= DEAD_LETTER_SCAN_S:
            dead = dead_lettered(store, backfill_id)
            scanned[backfill_id] = (now, dead)
        return int(evaluated), int(failed) + dead

    return read


# --- the pump ------------------------------------------------------------------------------------


@dataclass
class _Options:
    send: SendBatch
    store: BackfillStore | None
    backfill_id: str
    resuming: bool
    batch_size: int
    format: str
    unit: str
    metric_set: str | None
    sampler: Sampler | None
    queue_depth: Callable[[], int] | None
    max_queue_depth: int | None
    pacer: _Pacer
    poll_interval_s: float
    retry: BackfillRetry
    progress: Callable[[BackfillProgress], None] | None
    evaluated: EvaluatedCounts | None
    evaluated_interval_s: float
    should_stop: Callable[[BackfillProgress], bool] | None


class _Stop(Exception):
    """Internal: the stop hook asked to end after the current checkpoint."""


@dataclass(frozen=True)
class _Covered:
    """How much of a report the last checkpoint covers."""

    rejected: int
    kept_rejected: int
    not_ready: int
    kept_not_ready: int

    @classmethod
    def of(cls, report: ImportErrorReport) -> _Covered:
        kept = len(report.rejected), len(report.not_ready)
        return cls(report.rejected_count, kept[0], report.not_ready_count, kept[1])

    def restore(self, report: ImportErrorReport) -> None:
        report.rejected_count, report.not_ready_count = self.rejected, self.not_ready
        del report.rejected[self.kept_rejected :], report.not_ready[self.kept_not_ready :]


@dataclass
class _Pump:
    opts: _Options
    report: ImportErrorReport
    counts: dict[str, Any]  # BackfillProgress fields, mutable on the hot path; copies go out
    covered: _Covered
    _evaluated_at: float = field(default=-1e9)

    # progress ---------------------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        self.counts.update(changes)

    def _bump(self, name: str, by: int = 1) -> None:
        self.counts[name] += by

    def snapshot(self) -> BackfillProgress:
        return BackfillProgress(**self.counts)

    def _emit(self, *, force_evaluated: bool = False) -> None:
        self._set(rejected=self.report.rejected_count, not_ready=self.report.not_ready_count)
        self._refresh_evaluated(force=force_evaluated)
        if self.opts.progress is not None:
            self.opts.progress(self.snapshot())

    def _refresh_evaluated(self, *, force: bool) -> None:
        reader = self.opts.evaluated
        now = time.monotonic()
        due = now - self._evaluated_at >= self.opts.evaluated_interval_s
        if reader is None or not (force or due):
            return
        self._evaluated_at = now
        counts = reader(self.opts.backfill_id)
        if counts is not None:
            self._set(evaluated=counts[0], failed=counts[1])

    # stamping ---------------------------------------------------------------------------------

    def _stamp(self, snapshot: Snapshot) -> Snapshot | None:
        rule = backfill_rule(self.opts.backfill_id)
        update: dict[str, Any] = {}
        if self.opts.metric_set is not None:
            update["metric_set"] = self.opts.metric_set
        sampler = self.opts.sampler
        if sampler is None:
            stamp = Sampling(lane=Lane.BACKFILL, rate=1.0, weight=1.0, rule=rule)
            return replace_fields(snapshot, sampling=stamp, **update)
        if update:
            snapshot = replace_fields(snapshot, **update)
        return sampler.sample(snapshot, lane=Lane.BACKFILL, rule_prefix=rule + "/")

    # sending ----------------------------------------------------------------------------------

    def _wait_for_room(self) -> None:
        depth_of, limit = self.opts.queue_depth, self.opts.max_queue_depth
        if depth_of is None or limit is None:
            return
        while (depth := int(_retrying(depth_of, self.opts.retry))) >= limit:
            self._set(queue_depth=depth, waiting=True)
            self._emit()
            time.sleep(self.opts.poll_interval_s)
        self._set(queue_depth=depth, waiting=False)

    def _send(self, source: str, batch: list[Snapshot], position: int, enqueued: int) -> int:
        """Send one batch, then checkpoint; returns the source's new enqueued count."""
        if self.stop_requested():  # asked while this batch was read: its lines are read again
            raise _Stop
        if batch:
            self._wait_for_room()
            self.opts.pacer.wait(len(batch))
            try:
                _retrying(lambda: self.opts.send(batch), self.opts.retry)
            except Exception:  # noqa: BLE001 - any send failure ends the run resumably
                raise BackfillError("SEND_FAILED", self.snapshot()) from None
            enqueued += len(batch)
            self._bump("enqueued", len(batch))
            self._bump("batches")
        self._checkpoint(source, position, enqueued)
        self._emit()
        if self.stop_requested():
            raise _Stop
        return enqueued

    def stop_requested(self) -> bool:
        """Whether the ``should_stop`` hook asks to end the run."""
        return self.opts.should_stop is not None and self.opts.should_stop(self.snapshot())

    def _checkpoint(self, source: str, position: int, enqueued: int) -> None:
        store = self.opts.store
        if store is not None:
            store.record_checkpoint(self.opts.backfill_id, source, position, enqueued)
        self.covered = _Covered.of(self.report)

    def rewind(self) -> None:
        """Forget what the report recorded after the last checkpoint (a stopped run)."""
        self.covered.restore(self.report)

    # reading ----------------------------------------------------------------------------------

    def _start(self, source: str) -> tuple[int, int] | None:
        """(position, enqueued) to resume ``source`` from; ``None`` when it is complete."""
        store = self.opts.store
        if not self.opts.resuming or store is None:
            return 0, 0
        if store.latest_checkpoint(self.opts.backfill_id, COMPLETE_PREFIX + source) is not None:
            return None
        last = store.latest_checkpoint(self.opts.backfill_id, source)
        return (0, 0) if last is None else (last.position, last.enqueued)

    def check_unchanged(self, sources: list[Path]) -> None:
        """On resume, before anything is sent: refuse a file that changed since it was started."""
        store = self.opts.store
        if not self.opts.resuming or store is None:
            return
        for path in sources:
            # Finished files too: a resume does not re-read them, so new lines would be lost.
            source = str(path)
            known = store.latest_checkpoint(self.opts.backfill_id, FINGERPRINT_PREFIX + source)
            if known is not None and (known.position, known.enqueued) != file_fingerprint(path):
                raise BackfillInputError(
                    f"{source} changed since backfill {self.opts.backfill_id} started reading "
                    "it (size, mtime or first bytes differ), so resuming would skip or repeat "
                    "lines (INPUT_CHANGED); run the backfill again without --resume to re-read "
                    "it from the start (the workers skip what they already evaluated)"
                )

    def _remember(self, path: Path) -> None:
        """Record the file's fingerprint as this backfill starts (or first resumes) it."""
        store = self.opts.store
        if store is None:
            return
        key = FINGERPRINT_PREFIX + str(path)
        if self.opts.resuming and store.latest_checkpoint(self.opts.backfill_id, key):
            return
        digest, size = file_fingerprint(path)
        store.record_checkpoint(self.opts.backfill_id, key, digest, size)

    def run_source(self, path: Path) -> None:
        source = str(path)
        self._set(source=source)
        start = self._start(source)
        if start is None:
            self._bump("files_done")
            return
        self._remember(path)
        done, enqueued = start
        batch: list[Snapshot] = []
        position = 0
        for position, located in enumerate(self._read(path), start=1):
            self._bump("read")
            if position <= done:
                self._bump("skipped")
                continue
            stamped = self._stamp(located.snapshot)
            if stamped is None:
                self._bump("sampled_out")
            else:
                batch.append(stamped)
            if len(batch) >= self.opts.batch_size:
                enqueued = self._send(source, batch, position, enqueued)
                batch = []
        if batch or position > done:
            enqueued = self._send(source, batch, position, enqueued)
        self._checkpoint(COMPLETE_PREFIX + source, position, enqueued)
        self._bump("files_done")

    def _read(self, path: Path) -> Iterator[Any]:
        return read_located(path, self.opts.format, self.opts.unit, report=self.report)


def run_backfill(
    paths: Iterable[str | Path],
    send: SendBatch,
    store: BackfillStore | None = None,
    *,
    backfill_id: str | None = None,
    resume: str | None = None,
    batch_size: int = 500,
    max_queue_depth: int | None = None,
    queue_depth: Callable[[], int] | None = None,
    rate_limit_per_s: float | None = None,
    progress: Callable[[BackfillProgress], None] | None = None,
    evaluated: EvaluatedCounts | None = None,
    format: str = "auto",  # noqa: A002 - mirrors read_snapshots
    unit: str = "invocation",
    metric_set: str | None = None,
    sampler: Sampler | None = None,
    poll_interval_s: float = 0.5,
    evaluated_interval_s: float = 2.0,
    retry: BackfillRetry = BackfillRetry(),
    should_stop: Callable[[BackfillProgress], bool] | None = None,
    report: ImportErrorReport | None = None,
) -> BackfillSummary:
    """Stream ``paths`` onto the backfill lane (see the module docstring).

    ``send(batch)`` enqueues one batch (raising on failure). ``store`` records checkpoints and
    is required for ``resume``. ``queue_depth()`` + ``max_queue_depth`` give back-pressure (in
    messages). ``should_stop(progress)``, checked before each batch is sent and after its
    checkpoint, ends the run early and cleanly at the last checkpoint (an operator's Ctrl-C
    handler, or a test's interruption); a ``ValueError`` raised while it asks to stop ends the
    run as stopped too (a signal handler's raise that C code swallowed mid-validation). A
    stopped run's ``rejected`` holds only the lines its checkpoints cover (module docstring).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if resume is not None and store is None:
        raise ValueError("resume needs the store that holds the checkpoints")
    sources = expand_paths(paths)
    computed = backfill_id_for(
        sources, format=format, unit=unit, metric_set=metric_set, sampler=sampler
    )
    if resume is not None and store is not None and not _has_checkpoints(store, resume, sources):
        # A mistyped id (derived or custom) is unknown, not a mismatch; resuming it would
        # restart under a new rule: new snapshot ids, everything evaluated a second time.
        raise ValueError("no checkpoints for this backfill id and these paths (UNKNOWN_BACKFILL)")
    if resume is not None and resume.startswith("bf-") and resume != computed:
        raise ValueError("resume id does not match these paths and options (BACKFILL_MISMATCH)")
    chosen = resume or backfill_id or computed
    opts = _Options(
        send=send, store=store, backfill_id=chosen, resuming=resume is not None,
        batch_size=batch_size, format=format, unit=unit, metric_set=metric_set,
        sampler=sampler, queue_depth=queue_depth, max_queue_depth=max_queue_depth,
        pacer=_Pacer(rate_limit_per_s), poll_interval_s=poll_interval_s, retry=retry,
        progress=progress, evaluated=evaluated, evaluated_interval_s=evaluated_interval_s,
        should_stop=should_stop,
    )  # fmt: skip
    return _run(opts, sources, report or ImportErrorReport())


def _has_checkpoints(store: BackfillStore, backfill_id: str, sources: list[Path]) -> bool:
    # A file's fingerprint counts: a run stopped before its first batch (a Ctrl-C while it
    # read) printed its id as resumable, and resuming it reads the file from the start.
    return any(
        store.latest_checkpoint(backfill_id, name) is not None
        for path in sources
        for name in (str(path), COMPLETE_PREFIX + str(path), FINGERPRINT_PREFIX + str(path))
    )


def _run(opts: _Options, sources: list[Path], report: ImportErrorReport) -> BackfillSummary:
    start = BackfillProgress(backfill_id=opts.backfill_id, files_total=len(sources))
    pump = _Pump(opts, report, asdict(start), _Covered.of(report))
    stopped = False
    pump.check_unchanged(sources)
    try:
        for path in sources:
            pump.run_source(path)
    except _Stop:
        stopped = True
    except ValueError:
        # A stop requested by a signal whose handler raised inside a check that C code calls
        # (an isinstance in pydantic's validation) is swallowed there and surfaces as a
        # validation error of a valid line: with a stop requested, the run ends as stopped at
        # its last checkpoint, and a resume reads that line again.
        if not pump.stop_requested():
            raise
        stopped = True
    if stopped:
        pump.rewind()
    pump._set(source=None, waiting=False)
    pump._emit(force_evaluated=True)
    return BackfillSummary(pump.snapshot(), stopped, tuple(report.rejected))


# --- progress display ----------------------------------------------------------------------------


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def _describe(p: BackfillProgress) -> str:
    text = (
        f"read {p.read} · enqueued {p.enqueued} · evaluated {_count(p.evaluated)} · "
        f"failed {_count(p.failed)} · rejected lines {p.rejected}"
    )
    if p.skipped:
        text += f" · already sent {p.skipped}"
    if p.waiting:
        text += f" · waiting: queue depth {p.queue_depth}"
    return text


@contextmanager
def rich_progress(console: Console | None = None) -> Iterator[Callable[[BackfillProgress], None]]:
    """A rich progress display; yields the ``progress`` callback for :func:`run_backfill`.

    The bar is evaluated/enqueued (the store's read-back); the line shows read, enqueued,
    evaluated, failed and rejected counts, and when back-pressure holds the pump.
    """
    display = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=console,
    )
    with display:
        task = display.add_task("backfill", total=None, counts="")

        def update(p: BackfillProgress) -> None:
            display.update(
                task,
                description=f"{p.backfill_id} [{p.files_done}/{p.files_total} files]",
                completed=p.evaluated or 0,
                total=p.enqueued or None,
                counts=_describe(p),
            )

        yield update


# --- outcomes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutcomeSummary:
    """Outcome events sent, lines rejected (with the first examples)."""

    sent: int
    rejected: int
    rejected_examples: tuple[RejectedLine, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for ``--json`` output."""
        return asdict(self)


EVENT_ID_CONFLICT = "EVENT_ID_CONFLICT"
"""An outcome whose event id was already sent (or stored) with different content."""
KnownOutcome = Callable[[str], "OutcomeEvent | None"]


def _outcome_rejection(path: Path, line: int, exc: ValidationError) -> RejectedLine:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "type": "invalid"}
    where = ".".join(str(p) for p in first["loc"]) or "$"
    code = "INVALID_JSON" if first["type"] == "json_invalid" else "INVALID_FIELD"
    return RejectedLine(
        path=str(path), line=line, field=where, code=code, message="value fails validation"
    )


def outcome_problem(event: OutcomeEvent) -> tuple[str, str] | None:
    """Why a worker would refuse ``event`` (code, message); ``None`` when it can be sent."""
    try:
        text = canonical_json(event.wire())  # pydantic raises past its nesting depth
    except (ValueError, RecursionError):
        return "JSON_TOO_DEEP", "value is nested too deeply to be sent"
    if len(text.encode("utf-8", "surrogatepass")) > MAX_ITEM_BYTES:
        return "PAYLOAD_TOO_LARGE", "event is over the worker's size limit"
    return None


def outcome_digest(event: OutcomeEvent) -> bytes:
    """A digest of an event's content, to tell a repeat from a conflicting reuse of its id."""
    return hashlib.sha256(canonical_json(event.wire()).encode("utf-8", "surrogatepass")).digest()


@dataclass
class _OutcomeRun:
    """One outcome file's state: counts, kept examples, the content of each event id seen."""

    source: Path
    keep: int
    on_reject: Callable[[RejectedLine], object] | None
    known: KnownOutcome | None
    sent: int = 0
    rejected: int = 0
    examples: list[RejectedLine] = field(default_factory=list)
    seen: dict[str, bytes] = field(default_factory=dict)

    def reject(self, line: int, fld: str, code: str, message: str) -> None:
        self.add(
            RejectedLine(path=str(self.source), line=line, field=fld, code=code, message=message)
        )

    def add(self, rejection: RejectedLine) -> None:
        self.rejected += 1
        if len(self.examples) < self.keep:
            self.examples.append(rejection)
        if self.on_reject is not None:
            self.on_reject(rejection)

    def conflicts(self, event: OutcomeEvent) -> bool:
        """True when the event id was sent (here) or stored with different content."""
        digest = outcome_digest(event)
        earlier = self.seen.setdefault(event.event_id, digest)
        if earlier != digest:
            return True
        stored = self.known(event.event_id) if self.known is not None else None
        return stored is not None and outcome_digest(stored) != digest


def send_outcomes(
    path: str | Path,
    send: Callable[[OutcomeEvent], object],
    *,
    keep: int = 1000,
    on_reject: Callable[[RejectedLine], object] | None = None,
    known: KnownOutcome | None = None,
) -> OutcomeSummary:
    """Stream a JSONL file of outcome events to ``send`` (e.g. ``Producer.outcome``).

    A bad line is rejected with its file, line and field (the JSON path pydantic names) and the
    rest of the file is still sent; the summary counts every rejection and keeps ``keep`` of them.
    ``on_reject`` sees every rejection as it happens. An event that reuses an event id with
    different content (earlier in the file, or in the store through ``known(event_id)``) is
    rejected as ``EVENT_ID_CONFLICT``, not sent: a worker keeps the first and drops the rest.
    """
    run = _OutcomeRun(Path(path), keep, on_reject, known)
    # Bytes, not text: a line that is not UTF-8 is one rejection, not the end of the file.
    with run.source.open("rb") as lines:
        number = 0
        while text := lines.readline(MAX_ITEM_BYTES + 1):
            number += 1
            if len(text) > MAX_ITEM_BYTES and not text.endswith(b"\n"):
                while (rest := lines.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                run.reject(number, "$", "PAYLOAD_TOO_LARGE", "line is over the worker's limit")
                continue
            if text.strip():
                _outcome_line(run, number, text, send)
    return OutcomeSummary(run.sent, run.rejected, tuple(run.examples))


def _outcome_line(
    run: _OutcomeRun, number: int, text: bytes, send: Callable[[OutcomeEvent], object]
) -> None:
    try:
        event = OutcomeEvent.model_validate_json(text)
    except ValidationError as exc:
        run.add(_outcome_rejection(run.source, number, exc))
        return
    problem = outcome_problem(event)
    if problem is not None:
        run.reject(number, "value", *problem)
        return
    if run.conflicts(event):
        message = f"event id {event.event_id!r} was already sent with different content"
        run.reject(number, "event_id", EVENT_ID_CONFLICT, message)
        return
    send(event)
    run.sent += 1
