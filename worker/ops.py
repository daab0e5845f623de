"""Operations behind the CLI: run a worker, redrive dead letters, and ``evalq run``.

The CLI (``producer.cli``) only parses flags and prints; everything it does is here, callable
from Python and tests.

``run_pipeline`` is the embedded default: with no broker configured it starts a private Redis
(``worker.embedded.RedisServer``, data in a temporary directory), spawns a real worker process,
enqueues the file through the same Celery tasks as production (no eager mode), waits — bounded —
until every snapshot has its evaluation (or a dead letter), and stops what it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from producer import ImportErrorReport, Lane, OutcomeEvent, Producer, Snapshot, read_snapshots
from producer._reader import RejectedLine
from producer.snapshot import MAX_ITEM_BYTES, SamplingTally, WindowViolation
from worker.app import create_app
from worker.broker import broker_transport_options
from worker.dead_letters import NOT_REDRIVABLE
from worker.embedded import RedisServer
from worker.lifecycle import PARENT_ENV
from worker.metric_sets import METRIC_SETS
from worker.runtime import configured_metric_set
from worker.settings import ConfigError, Settings
from worker.store import DeadLetter, Store, StoreError, failure_line, open_store
from worker.supervisor import Supervisor

__all__ = [
    "RedriveSkip",
    "RedriveSummary",
    "RunResult",
    "WorkerProcess",
    "preflight",
    "redrive",
    "run_pipeline",
    "run_worker",
    "snapshots_for",
    "with_metric_set",
]


# --- worker ------------------------------------------------------------------------------------


def worker_argv(settings: Settings, hostname: str | None = None) -> list[str]:
    """Celery worker arguments of ONE consumer process (lane queues, prefetch, events on)."""
    name = hostname or f"evalq-{os.getpid()}@%h"
    return [
        "worker",
        "--pool=solo",  # never given a message: evalq's consumer evaluates on the event loop
        f"--concurrency={settings.process_concurrency}",  # prefetch: one message per slot
        f"--queues={','.join(settings.queues)}",
        f"--loglevel={settings.log_level}",
        f"--hostname={name}",
        "--task-events",
        "--without-gossip",
        "--without-mingle",
    ]


def preflight(settings: Settings) -> None:
    """Fail fast, naming ``EVALQ_STORE_URL``, when the store cannot be opened (and migrated)."""
    try:
        store = open_store(settings.store_url)
    except StoreError as exc:
        raise ConfigError(failure_line(settings.store_url, exc.code)) from None
    except ValueError as exc:  # the store's URL errors already name the variable
        raise ConfigError(str(exc)) from None
    store.close()


def run_worker(settings: Settings, *, hostname: str | None = None) -> int:
    """Run a worker until it is stopped (``evalq worker``); its exit status.

    The store is checked first, so a worker that could never record anything does not start.
    With ``processes`` > 1 this process supervises that many consumer processes
    (:mod:`worker.supervisor`); with one it is the consumer. A supervised consumer skips the
    check (its supervisor made it): a store unreachable when it is restarted ends it with 75,
    which the supervisor backs off and retries, not with 2, which stops the whole worker.
    """
    if not os.environ.get(PARENT_ENV):
        preflight(settings)
    if settings.processes > 1:
        return Supervisor(settings, hostname).run()
    return create_app(settings).serve(worker_argv(settings, hostname))


# --- producing ---------------------------------------------------------------------------------


def with_metric_set(snapshot: Snapshot, name: str) -> Snapshot:
    """``snapshot`` asking for metric set ``name`` (a new snapshot, so a new id, if it differs)."""
    if snapshot.metric_set == name:
        return snapshot
    return Snapshot.model_validate({**snapshot.wire(), "metric_set": name})


def snapshots_for(
    path: Path, settings: Settings, *, report: ImportErrorReport | None = None, **reader: Any
) -> Iterator[Snapshot]:
    """Snapshots of ``path`` stamped with the configured metric set."""
    for snapshot in read_snapshots(path, report=report, **reader):
        yield with_metric_set(snapshot, settings.metric_set)


def producer_for(settings: Settings, broker_url: str | None = None) -> Producer:
    """A :class:`Producer` on the configured broker with the worker's transport options."""
    url = broker_url or settings.require_broker()
    return Producer(url, transport_options=broker_transport_options(settings, url))


# --- redrive -----------------------------------------------------------------------------------


REDRIVE_SHOWN = 20
"""Dead letters a redrive names individually among those it left open."""


@dataclass(frozen=True)
class RedriveSkip:
    """A dead letter left open: its id, its reason, and why it was not re-enqueued (a code).

    ``code``: ``TRUNCATED`` (only the head of the payload was kept), ``UNDECODABLE`` (the
    payload is not JSON text), ``UNKNOWN_PAYLOAD`` (no snapshot, outcome or tally), or the
    worker's reason code it would be dead-lettered with again (``UNKNOWN_METRIC_SET``,
    ``WINDOW_VIOLATION``, ``JSON_TOO_DEEP``, ...). ``items`` counts the snapshots that are
    still invalid (the valid ones of a batch were re-enqueued).
    """

    dead_letter_id: str
    reason: str
    code: str
    items: int = 1

    def __str__(self) -> str:
        return f"{self.dead_letter_id} ({self.reason}): {self.code}"


@dataclass(frozen=True)
class RedriveSummary:
    """What one redrive did: dead letters examined, re-enqueued, and still invalid (left open).

    ``skipped`` names the first :data:`REDRIVE_SHOWN` dead letters left open, with the code of
    why; a dead letter that would be dead-lettered again is never re-enqueued.
    """

    examined: int
    redriven: int
    still_invalid: int
    skipped: tuple[RedriveSkip, ...] = ()


class _StillInvalidError(Exception):
    """A payload that a worker would refuse again (``code``)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _unwrap(body: Any) -> Any:
    """The task argument in a raw body (``[args, kwargs, embed]`` or ``{args, kwargs}``)."""
    if isinstance(body, list) and len(body) == 3 and isinstance(body[0], list):
        args, kwargs = body[0], body[1]
    elif isinstance(body, dict) and set(body) == {"args", "kwargs"}:
        args, kwargs = body["args"], body["kwargs"]
    else:
        return body
    return args[0] if isinstance(args, list) and len(args) == 1 and not kwargs else None


def _sendable_json(model: Snapshot | OutcomeEvent | SamplingTally) -> None:
    """Raise :class:`_StillInvalidError` if the worker's size or depth checks would refuse it."""
    try:
        text = model.model_dump_json()  # pydantic stops at a nesting depth of about 255
        size = len(text.encode("utf-8"))
    except (ValueError, RecursionError):  # includes UnicodeEncodeError (lone surrogates)
        raise _StillInvalidError("JSON_TOO_DEEP") from None
    if size > MAX_ITEM_BYTES:
        raise _StillInvalidError("PAYLOAD_TOO_LARGE")


def _accepted_snapshot(item: Any) -> Snapshot:
    """The snapshot a worker would evaluate now, else :class:`_StillInvalidError` with its code."""
    try:
        snapshot = Snapshot.model_validate(item)
    except ValidationError:
        raise _StillInvalidError("SCHEMA_INVALID") from None
    _sendable_json(snapshot)
    try:
        snapshot.trace()
    except WindowViolation:
        raise _StillInvalidError("WINDOW_VIOLATION") from None
    except (ValueError, RecursionError):
        raise _StillInvalidError("TRACE_INVALID") from None
    if snapshot.metric_set not in METRIC_SETS:
        raise _StillInvalidError("UNKNOWN_METRIC_SET")
    return snapshot


def _as_snapshots(item: Any) -> tuple[list[Snapshot], list[str]] | None:
    """(valid snapshots, codes of the invalid items), or None when no item is a snapshot."""
    items = item if isinstance(item, list) and item else [item]
    valid: list[Snapshot] = []
    codes: list[str] = []
    for one in items:
        try:
            valid.append(_accepted_snapshot(one))
        except _StillInvalidError as exc:
            codes.append(exc.code)
    looks_like_snapshots = any(isinstance(i, dict) and "events" in i for i in items)
    if not valid and not looks_like_snapshots:
        return None
    return valid, codes


def _as_outcome(item: Any) -> OutcomeEvent | None:
    try:
        event = OutcomeEvent.model_validate(item)
    except ValidationError:
        return None
    _sendable_json(event)
    return event


def _as_tally(item: Any) -> SamplingTally | None:
    try:
        tally = SamplingTally.model_validate(item)
    except ValidationError:
        return None
    _sendable_json(tally)
    return tally


def _decode_payload(dead: DeadLetter) -> Any:
    if dead.truncated:
        raise _StillInvalidError("TRUNCATED")
    try:
        return _unwrap(json.loads(dead.payload.decode("utf-8"), parse_constant=_no_constant))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _StillInvalidError("UNDECODABLE") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")


def _redrive_one(dead: DeadLetter, producer: Producer, batch_size: int) -> RedriveSkip | None:
    """Re-enqueue one dead letter if a worker would accept it now; else why it stays open.

    Of a batch, the valid snapshots are re-enqueued and the dead letter stays open (naming the
    items still invalid): re-sending the valid ones again later is absorbed by idempotency.
    """
    try:
        item = _decode_payload(dead)
        snapshots = _as_snapshots(item)
        if snapshots is not None:
            valid, codes = snapshots
            if valid:
                lane = Lane(dead.lane) if dead.lane in tuple(Lane) else None
                size = min(batch_size, len(valid))
                producer.send_many(valid, lane=lane, batch_size=size)
            if codes:
                return RedriveSkip(dead.dead_letter_id, dead.reason, codes[0], len(codes))
            return None
        event = _as_outcome(item)
        if event is not None:
            producer.outcome(event)
            return None
        tally = _as_tally(item)
        if tally is not None:
            producer.send_tally(tally)
            return None
    except _StillInvalidError as exc:
        return RedriveSkip(dead.dead_letter_id, dead.reason, exc.code)
    return RedriveSkip(dead.dead_letter_id, dead.reason, "UNKNOWN_PAYLOAD")


def redrive(
    store: Store, producer: Producer, *, reason: str | None = None, batch_size: int = 1
) -> RedriveSummary:
    """Re-enqueue every open dead letter (optionally of one reason code) a worker accepts now.

    Each one sent gets a redrive record (after the publish: a crash in between re-sends it next
    time, which the workers' idempotency absorbs). The rest stay open and are reported: a
    payload that cannot be decoded (truncated, not JSON) is skipped, and one that a worker
    would dead-letter again (an unknown metric set, a window violation, too deep or too large,
    an outcome conflict) is "still invalid", never re-enqueued, so repeated redrives converge.
    """
    examined = redriven = left = 0
    skipped: list[RedriveSkip] = []
    for dead in store.open_dead_letters(reason):
        examined += 1
        skip = (  # e.g. OUTCOME_CONFLICT: re-sent, it would only come back
            RedriveSkip(dead.dead_letter_id, dead.reason, dead.reason)
            if dead.reason in NOT_REDRIVABLE
            else _redrive_one(dead, producer, batch_size)
        )
        if skip is None:
            store.record_redrive(dead.dead_letter_id)
            redriven += 1
            continue
        left += 1
        if len(skipped) < REDRIVE_SHOWN:
            skipped.append(skip)
    return RedriveSummary(examined, redriven, left, tuple(skipped))


# --- evalq run ---------------------------------------------------------------------------------


class WorkerProcess:
    """A worker subprocess in its own session (so it and its children can be stopped together)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def alive(self) -> bool:
        """True while the worker's main process runs."""
        return self.process.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """Warm shutdown (SIGTERM to the main process only), then SIGKILL the whole group."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace_s)
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass
class RunResult:
    """Outcome of ``evalq run``: what was expected, evaluated, dead-lettered, and the tallies."""

    store_location: str
    broker_url: str
    metric_set_version: str
    expected: int
    evaluated: int
    dead_lettered: int
    rejected_lines: int
    timed_out: bool
    worker_log: Path | None
    by_metric: dict[str, Counter[str]] = field(default_factory=dict)
    rejected_examples: tuple[RejectedLine, ...] = ()
    passed: dict[str, int] = field(default_factory=dict)


def _tally(store: Store, ids: Iterable[str], version: str, result: RunResult) -> None:
    for snapshot_id in ids:
        stored = store.find_evaluation(snapshot_id, version)
        if stored is None:
            continue
        for row in stored.record.results:
            result.by_metric.setdefault(row.metric_id, Counter())[row.status] += 1
            if row.passed:
                result.passed[row.metric_id] = result.passed.get(row.metric_id, 0) + 1


def _progress(store: Store, ids: set[str], version: str) -> tuple[int, int]:
    evaluated = sum(1 for i in ids if store.find_evaluation(i, version) is not None)
    dead = {d.payload_sha256 for d in store.open_dead_letters()} & ids
    return evaluated, len(dead)


@contextmanager
def _broker(settings: Settings, workdir: Path) -> Iterator[str]:
    if settings.broker_url is not None:
        yield settings.broker_url
        return
    with RedisServer(workdir / "redis") as server:
        yield server.url


def _worker_env(settings: Settings, broker_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["EVALQ_BROKER_URL"] = broker_url
    env["EVALQ_STORE_URL"] = settings.store_url
    if settings.config is not None:  # `evalq run --config FILE`: the worker reads it too
        env["EVALQ_CONFIG"] = str(settings.config.resolve())
    return env


def _wait(
    store: Store,
    *,
    ids: set[str],
    version: str,
    deadline: float,
    worker: WorkerProcess | None,
    progress: Callable[[int, int, int], None] | None,
) -> tuple[int, int, bool]:
    while True:
        evaluated, dead = _progress(store, ids, version)
        if progress is not None:
            progress(evaluated, dead, len(ids))
        if evaluated + dead >= len(ids):
            return evaluated, dead, False
        if time.monotonic() >= deadline or (worker is not None and not worker.alive()):
            return evaluated, dead, True
        time.sleep(0.2)


def run_pipeline(
    path: Path,
    settings: Settings,
    *,
    spawn_worker: bool = True,
    timeout_s: float = 300.0,
    progress: Callable[[int, int, int], None] | None = None,
) -> RunResult:
    """``evalq run FILE``: the whole pipeline on this machine, through the real queue."""
    workdir = Path(tempfile.mkdtemp(prefix="evalq-run-"))
    store = open_store(settings.store_url)
    metric_set = configured_metric_set(settings, settings.metric_set)
    with ExitStack() as stack:
        stack.callback(store.close)
        broker_url = stack.enter_context(_broker(settings, workdir))
        worker = None
        if spawn_worker:
            worker = WorkerProcess(_worker_env(settings, broker_url), workdir / "worker.log")
            stack.callback(worker.stop)
        rejected = ImportErrorReport(keep=20)
        with producer_for(settings, broker_url) as producer:
            ids = set(producer.enqueue_many(snapshots_for(path, settings, report=rejected)))
        deadline = time.monotonic() + timeout_s
        evaluated, dead, timed_out = _wait(
            store,
            ids=ids,
            version=metric_set.version,
            deadline=deadline,
            worker=worker,
            progress=progress,
        )
        result = RunResult(
            store_location=store.location,
            broker_url=broker_url if settings.broker_url else "embedded redis (stopped)",
            metric_set_version=metric_set.version,
            expected=len(ids),
            evaluated=evaluated,
            dead_lettered=dead,
            rejected_lines=rejected.rejected_count,
            rejected_examples=tuple(rejected.rejected),
            timed_out=timed_out,
            worker_log=worker.log_path if worker else None,
        )
        _tally(store, ids, metric_set.version, result)
    if not result.timed_out:
        shutil.rmtree(workdir, ignore_errors=True)  # kept on failure: it holds the worker log
        result.worker_log = None
    return result
