"""Shared machinery of the figure benchmarks: services, workers, snapshots, timing, the table.

Every figure starts what it measures and stops it at the end, whatever happens: a private Redis
(:class:`worker.embedded.RedisServer`), the synthetic judge server as its own process (System One
wire format, ``--latency-ms``), and worker processes (``python -m worker``, configured only through
``EVALQ_*`` variables, each in its own process group). Nothing here is a test: figures print a
table row each (figure, measured, baseline, ratio, target, pass/fail) and the machine's load
average, because other work on a 2-core machine skews every ratio.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis
from celery import Celery

from producer import Lane, Producer, Snapshot, read_snapshots
from producer.snapshot import LANE_QUEUES
from worker.broker import queue_keys
from worker.embedded import RedisServer

__all__ = [
    "API_KEY",
    "BASE_TRACE",
    "CLI_COMMAND",
    "NOOP_TASK",
    "REPO",
    "SMALL_TRACE",
    "Bench",
    "Drain",
    "JudgeQueueProbe",
    "RecordStore",
    "Row",
    "Worker",
    "base_snapshot",
    "count_evaluations",
    "cpu_seconds",
    "created_times",
    "deployment_env",
    "drain_cpu",
    "fill_backfill",
    "fresh_postgres",
    "load_average",
    "main_for",
    "measure_drain",
    "middle_rate",
    "percentile",
    "queue_depth",
    "rss_kib",
    "small_snapshot",
    "snapshots",
    "solo_noop_rate",
    "table",
    "wait_for",
    "wait_recorded",
    "write_traces",
]

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "traces.jsonl"
BASE_TRACE = "order-42"
"""The example every figure evaluates: the ``agent`` set packs it into exactly one judge request."""
API_KEY = "bench-key"
NOOP_TASK = "bench.noop"
"""The baseline's no-op task (``bench._noop_app``)."""
_LISTENING = re.compile(rb"listening on (http://\S+)")


def load_average() -> str:
    """The 1/5/15-minute load averages, printed with every result."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a worker's evaluator processes), from ``/proc``."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):  # a thread or child that just ended
                todo.extend(int(child) for child in task.read_text().split())
    return found


def _own_rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError):  # a process that just ended holds no memory
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rss_kib(pid: int) -> int:
    """Resident set size in KiB of process ``pid`` and its descendants (``VmRSS`` summed)."""
    total = sum(_own_rss_kib(p) for p in process_tree(pid))
    if total == 0:
        raise RuntimeError(f"no VmRSS for pid {pid}")
    return total


def wait_for(
    predicate: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.02
) -> float:
    """Poll until ``predicate()``; return the seconds it took, or raise naming ``what``."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)
    return time.monotonic() - started


class JudgeQueueProbe:
    """The stand-in judge's own queueing while a figure runs: a request every ``every_s`` that it
    answers without its latency (a wrong key: 401 at once), timed round trip.

    A closed-loop backfill keeps ``--concurrency`` requests at the stand-in, so on a small
    machine the stand-in itself queues them (Little's law: in flight / its throughput); a live
    request waits in the same queue. Printed beside a latency figure, it separates what the
    stand-in added from what evalq did.
    """

    def __init__(self, base_url: str, every_s: float = 0.05) -> None:
        self._url = base_url.rstrip("/") + "/v1/systemone"
        self._every_s = every_s
        self._stop = threading.Event()
        self.round_trips_ms: list[float] = []
        self._thread = threading.Thread(target=self._run, name="judge-probe", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(15.0)

    def _run(self) -> None:
        headers = {"Authorization": "Bearer not-the-key"}
        while not self._stop.wait(self._every_s):
            started = time.monotonic()
            request = urllib.request.Request(self._url, data=b"{}", headers=headers)
            try:
                urllib.request.urlopen(request, timeout=10).close()
            except urllib.error.HTTPError:
                pass  # the 401 is the answer
            except OSError:
                continue  # no answer: nothing to time
            self.round_trips_ms.append((time.monotonic() - started) * 1000)

    def note(self) -> str:
        """``stand-in judge queueing P50 x ms, P95 y ms (n pings)`` or that none answered."""
        if not self.round_trips_ms:
            return "stand-in judge queueing: no ping answered"
        values = self.round_trips_ms
        return (
            f"stand-in judge queueing P50 {percentile(values, 0.5):.0f} ms, "
            f"P95 {percentile(values, 0.95):.0f} ms ({len(values)} pings)"
        )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def middle_rate(times: Sequence[float], low: float = 0.1, high: float = 0.9) -> float:
    """Events per second between the ``low`` and ``high`` quantiles of their (sorted) times.

    Start-up and the tail (the last batches draining) are excluded: what is left is the
    steady state.
    """
    ordered = sorted(times)
    first = round(low * (len(ordered) - 1))
    last = round(high * (len(ordered) - 1))
    span = ordered[last] - ordered[first]
    if last <= first or span <= 0:
        raise ValueError("too few events to measure a rate")
    return (last - first) / span


# --- snapshots --------------------------------------------------------------------------------


def base_snapshot() -> Snapshot:
    """The example trace every figure evaluates (one packed judge request)."""
    for snapshot in read_snapshots(EXAMPLES):
        if snapshot.trace_id == BASE_TRACE:
            return snapshot
    raise RuntimeError(f"{BASE_TRACE} is missing from {EXAMPLES}")


SMALL_TRACE = {
    "id": "small",
    "messages": [
        {"role": "user", "content": "Where is order 7?"},
        {"role": "assistant", "content": "Order 7 ships tomorrow."},
    ],
}
"""A short chat (one question, one answer): the shape of P3's generated backfill lines."""


def small_snapshot() -> Snapshot:
    """:data:`SMALL_TRACE` through the real reader (OpenAI chat importer, invocation unit)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "small.jsonl"
        path.write_text(json.dumps(SMALL_TRACE) + "\n", encoding="utf-8")
        (snapshot,) = read_snapshots(path)
    return snapshot


def snapshots(
    count: int, prefix: str, lane: Lane = Lane.BACKFILL, *, small: bool = False
) -> Iterator[Snapshot]:
    """``count`` distinct snapshots (distinct trace ids) with the base (or small) content."""
    wire = (small_snapshot() if small else base_snapshot()).wire()
    sampling = {**wire["sampling"], "lane": lane.value}
    for i in range(count):
        yield Snapshot.model_validate({**wire, "trace_id": f"{prefix}-{i}", "sampling": sampling})


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One figure's result line."""

    figure: str
    measured: float
    baseline: float
    ratio: float
    target: str
    passed: bool
    unit: str
    note: str = ""
    load: str = ""


def table(rows: Sequence[Row]) -> str:
    """The result table: figure, measured, baseline, ratio, target, pass/fail, load, note."""
    head = (
        f"{'figure':<28} {'measured':>12} {'baseline':>12} {'ratio':>7} {'target':>11} "
        f"{'result':>6}  {'load 1/5/15':<15} note"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.figure:<28} {r.measured:>12.1f} {r.baseline:>12.1f} {r.ratio:>7.2f} "
            f"{r.target:>11} {'PASS' if r.passed else 'FAIL':>6}  {r.load:<15} {r.unit}"
            + (f"; {r.note}" if r.note else "")
        )
    return "\n".join(lines)


def main_for(title: str, run: Callable[[bool], list[Row]], argv: Sequence[str] | None) -> int:
    """The ``__main__`` of one figure: ``--quick`` for a tiny smoke run; exit 1 on a FAIL."""
    import argparse  # noqa: PLC0415 - only the command-line entry needs it

    parser = argparse.ArgumentParser(description=title)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print(f"{title} ({os.cpu_count()} CPUs{', quick mode' if args.quick else ''})")
    print(table(rows))
    return 0 if all(r.passed for r in rows) or args.quick else 1


# --- processes --------------------------------------------------------------------------------


def _stop_process(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process, then SIGKILL its whole group (it runs in a session of its own)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


class Worker:
    """One ``python -m worker`` (or any argv) subprocess in its own process group."""

    def __init__(self, env: dict[str, str], log_path: Path, argv: list[str] | None = None) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv or [sys.executable, "-m", "worker"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def name_prefix(self) -> str:
        """Celery node name before ``@``: ``evalq-<pid>`` unless the argv names another."""
        for arg in self.process.args if isinstance(self.process.args, list) else []:
            if isinstance(arg, str) and arg.startswith("--hostname="):
                return arg.removeprefix("--hostname=").split("@")[0]
        return f"evalq-{self.process.pid}"

    @property
    def pid(self) -> int:
        """The worker's main process id (the threads pool runs every task in it)."""
        return self.process.pid

    @property
    def log(self) -> str:
        """The worker's log so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, broker_url: str, timeout_s: float = 60.0) -> None:
        """Wait until the worker answers a remote-control ping (raises if it died).

        A ping works at any log level (the ``ready.`` line is INFO, and benches log WARNING).
        """
        app = Celery("evalq-bench-ping", broker=broker_url, set_as_current=False)

        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"worker exited ({self.process.returncode}):\n{self.log[-3000:]}"
                )
            replies = app.control.ping(timeout=0.3)
            # one node per consumer process: evalq-<pid>.<i>@host (or evalq-<pid>@host alone)
            nodes = {name.partition("@")[0].partition(".")[0] for r in replies or [] for name in r}
            return self.name_prefix in nodes

        try:
            wait_for(ready, timeout_s, "the worker to be ready", poll_s=0.05)
        finally:
            app.close()

    def stop(self) -> None:
        """Warm shutdown, then SIGKILL of the whole group."""
        _stop_process(self.process)


class Bench:
    """Services of one figure: a temp dir, a private Redis, judge servers, workers.

    A context manager: every process it started is stopped on exit, in reverse order.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.directory = Path(tempfile.mkdtemp(prefix=f"evalq-bench-{name}-"))
        self.redis = RedisServer(self.directory / "redis")
        self._stops: list[Callable[[], None]] = []

    def __enter__(self) -> Self:
        self.redis.start()
        self._stops.append(self.redis.stop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        while self._stops:
            with contextlib.suppress(Exception):
                self._stops.pop()()
        shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def broker_url(self) -> str:
        """The private Redis."""
        return self.redis.url

    @property
    def store_path(self) -> Path:
        """The SQLite file the workers record into (the embedded default store)."""
        return self.directory / "evalq.db"

    @property
    def store_url(self) -> str:
        """``sqlite:////abs/path/evalq.db``."""
        return f"sqlite:///{self.store_path}"

    def redis_client(self) -> redis.Redis:
        """A client of the private Redis (closed with the bench)."""
        client = redis.Redis.from_url(self.broker_url)
        self._stops.append(client.close)
        return client

    def judge_server(self, latency_ms: float, *, nice: int = 0) -> str:
        """Start ``python -m worker.judges.testing`` with ``latency_ms``; returns its base URL.

        ``nice`` lowers its CPU priority: a replica that stands for a judge service on other
        machines should not take this machine's cores from the workers being measured.
        """
        env = {**os.environ, "BENCH_JUDGE_KEY": API_KEY}
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "worker.judges.testing", "--port", "0"),
                *("--latency-ms", f"{latency_ms}", "--api-key-env", "BENCH_JUDGE_KEY"),
            ],
            env=env,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self._stops.append(lambda: _stop_process(process))
        if nice:
            os.setpriority(os.PRIO_PROCESS, process.pid, nice)
        assert process.stdout is not None
        match = _LISTENING.search(process.stdout.readline())
        if match is None:
            raise RuntimeError("the judge server did not start")
        return match.group(1).decode()

    def worker_env(self, judge_url: str | None, settings: Mapping[str, Any]) -> dict[str, str]:
        """Environment of a worker: this one without ``EVALQ_*``, plus the bench's settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALQ_", "TYPESAFE_"))}
        values: dict[str, Any] = {
            "broker_url": self.broker_url,
            "store_url": self.store_url,
            "log_level": "WARNING",
        }
        if judge_url is not None:
            values.update(
                judge="systemone", judge_url=judge_url, judge_api_key=API_KEY, thresholds="0.2,0.8"
            )
        values.update(settings)
        env.update({f"EVALQ_{key.upper()}": str(value) for key, value in values.items()})
        return env

    def worker(
        self,
        judge_url: str | None,
        settings: Mapping[str, Any],
        argv: list[str] | None = None,
    ) -> Worker:
        """Start a worker process with ``EVALQ_*`` ``settings`` (not waited for).

        ``argv`` replaces ``python -m worker`` (the no-op baseline). Call
        :meth:`Worker.wait_ready` when the figure needs the worker consuming before it goes on.
        """
        return self.process(argv, self.worker_env(judge_url, settings))

    def process(self, argv: list[str] | None, env: dict[str, str], name: str = "worker") -> Worker:
        """Start ``argv`` (default ``python -m worker``) with exactly ``env``; stopped on exit."""
        log = self.directory / f"{name}-{len(self._stops)}.log"
        worker = Worker(env, log, argv)
        self._stops.append(worker.stop)
        return worker


def queue_depth(client: redis.Redis, lane: Lane) -> int:
    """Messages waiting in a lane queue (all of kombu's priority sub-lists)."""
    keys = queue_keys(LANE_QUEUES[lane])
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.llen(key)
    return sum(int(n) for n in pipe.execute())


# --- reading the store ------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


def count_evaluations(path: Path) -> int:
    """Evaluations recorded so far (0 before the store exists)."""
    if not path.exists():
        return 0
    with contextlib.closing(_connect(path)) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])
        except sqlite3.OperationalError:  # schema not created yet
            return 0


def created_times(
    path: Path, where: str = "", params: Sequence[Any] = ()
) -> list[tuple[float, Any]]:
    """``(created_at as unix seconds, requests)`` of every evaluation (optionally filtered)."""
    sql = "SELECT e.created_at, e.requests FROM evaluations e " + where
    with contextlib.closing(_connect(path)) as conn:
        rows = conn.execute(sql, tuple(params)).fetchall()
    return [(datetime.fromisoformat(str(at)).timestamp(), requests) for at, requests in rows]


# --- workloads --------------------------------------------------------------------------------


def fill_backfill(broker_url: str, count: int, prefix: str, batch_size: int) -> float:
    """Enqueue ``count`` distinct snapshots on the backfill lane, ``batch_size`` per message.

    Returns the seconds it took. Figures fill the queue *before* starting the worker, so the
    producer does not compete with the worker for the CPU while the worker is measured.
    """
    started = time.monotonic()
    with Producer(broker_url) as producer:
        producer.enqueue_many(snapshots(count, prefix), lane=Lane.BACKFILL, batch_size=batch_size)
    return time.monotonic() - started


def _own_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # a process that just ended
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of process ``pid`` and its descendants, all threads."""
    return sum(_own_cpu_s(p) for p in process_tree(pid))


def cpu_seconds_matching(cmdline_part: bytes, *, parent: int | None = None) -> float:
    """CPU seconds so far (descendants included) of this machine's processes whose command line
    contains ``cmdline_part``; with ``parent``, only that process's children."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):  # a process that just ended
            if not entry.name.isdigit() or cmdline_part not in (entry / "cmdline").read_bytes():
                continue
            stat = (entry / "stat").read_text()
            if parent is None or int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                total += cpu_seconds(int(entry.name))
    return total


def drain_cpu(path: Path, count: int, worker: Worker, timeout_s: float) -> float:
    """Wait for ``count`` records; the worker's CPU use (cores) between 10% and 90% of them.

    A rate-limited worker uses little CPU; a CPU-bound one uses about one core (the GIL).
    """
    marks: list[tuple[float, float]] = []
    started = time.monotonic()
    for fraction in (0.1, 0.9, 1.0):
        left_s = timeout_s - (time.monotonic() - started)
        wait_recorded(path, max(1, round(fraction * count)), max(1.0, left_s), worker)
        marks.append((time.monotonic(), cpu_seconds(worker.pid)))
    (t0, c0), (t1, c1) = marks[0], marks[1]
    return (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")


def wait_recorded(path: Path, count: int, timeout_s: float, worker: Worker | None = None) -> float:
    """Wait until ``count`` evaluations are recorded (raises if a worker died meanwhile)."""

    def done() -> bool:
        if worker is not None and worker.process.poll() is not None:
            raise RuntimeError(
                f"worker exited ({worker.process.returncode}):\n{worker.log[-3000:]}"
            )
        return count_evaluations(path) >= count

    return wait_for(done, timeout_s, f"{count} evaluations recorded", poll_s=0.25)


# --- user-facing commands (bench/lanes.py) ----------------------------------------------------

CLI_COMMAND = Path(sys.executable).with_name("evalq")
"""The ``evalq`` console script of the running virtualenv: figures start what a user starts."""
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def deployment_env(
    broker_url: str, store_url: str | None = None, judge_url: str | None = None
) -> dict[str, str]:
    """This environment without ``EVALQ_*``, plus the deployment facts only (no tuning knobs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALQ_", "TYPESAFE_"))}
    env["EVALQ_BROKER_URL"] = broker_url
    if store_url is not None:
        env["EVALQ_STORE_URL"] = store_url
    if judge_url is not None:
        env.update(
            EVALQ_JUDGE="systemone",
            EVALQ_JUDGE_URL=judge_url,
            EVALQ_JUDGE_API_KEY=API_KEY,
            EVALQ_THRESHOLDS="0.2,0.8",
        )
    return env


def write_traces(path: Path, count: int, prefix: str) -> Path:
    """A JSONL file of ``count`` copies of the base example trace, distinct ids (a user file)."""
    for line in EXAMPLES.read_text(encoding="utf-8").splitlines():
        trace = json.loads(line) if line.strip() else None
        if trace is not None and trace.get("id") == BASE_TRACE:
            break
    else:
        raise RuntimeError(f"{BASE_TRACE} is missing from {EXAMPLES}")
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            out.write(json.dumps({**trace, "id": f"{prefix}-{i}"}) + "\n")
    return path


@contextlib.contextmanager
def fresh_postgres(name: str) -> Iterator[str]:
    """A new database on 127.0.0.1:5432 (user postgres, trust auth); dropped afterwards."""
    import psycopg  # noqa: PLC0415 - only PostgreSQL figures need it
    from psycopg import sql  # noqa: PLC0415

    database = f"evalq_bench_{name}_{os.getpid()}_{time.monotonic_ns() % 10**9}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{database}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=10) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )


def _unix_s(value: Any) -> float:
    """A stored ``created_at``: ISO text (SQLite) or an aware datetime (PostgreSQL)."""
    at = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return at.timestamp()


@dataclass(frozen=True)
class RecordStore:
    """Read-only view of the records of an SQLite or PostgreSQL store (by ``EVALQ_STORE_URL``)."""

    url: str

    @property
    def is_sqlite(self) -> bool:
        """True for ``sqlite:///…`` URLs."""
        return self.url.startswith("sqlite:")

    def _rows(self, sql_text: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self.is_sqlite:
            path = Path(self.url.removeprefix("sqlite:///"))
            if not path.exists():
                return []
            with contextlib.closing(_connect(path)) as conn:
                try:
                    return list(conn.execute(sql_text.replace("%s", "?"), tuple(params)))
                except sqlite3.OperationalError:  # schema not created yet
                    return []
        import psycopg  # noqa: PLC0415 - only PostgreSQL figures need it

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            try:
                return list(conn.execute(sql_text, tuple(params)).fetchall())
            except psycopg.errors.UndefinedTable:  # schema not created yet
                return []

    def count(self) -> int:
        """Evaluations recorded so far (0 before the schema exists)."""
        rows = self._rows("SELECT COUNT(*) FROM evaluations", ())
        return int(rows[0][0]) if rows else 0

    def created(self, prefix: str = "", *, completed: bool = False) -> dict[str, float]:
        """``created_at`` (unix seconds) by trace id, of traces whose id starts with ``prefix``;
        with ``completed``, only evaluations without an ERROR result (a TIMEOUT is not
        throughput)."""
        sql_text = "SELECT trace_id, created_at FROM evaluations e WHERE trace_id LIKE %s"
        if completed:
            sql_text += (
                " AND NOT EXISTS (SELECT 1 FROM metric_results m"
                " WHERE m.evaluation_id = e.evaluation_id AND m.status = 'ERROR')"
            )
        return {str(trace): _unix_s(at) for trace, at in self._rows(sql_text, (f"{prefix}%",))}

    def error_reasons(self) -> dict[str, int]:
        """Evaluations with an ERROR result, by reason: a drain of errors is not throughput."""
        rows = self._rows(
            "SELECT reason, COUNT(DISTINCT evaluation_id) FROM metric_results "
            "WHERE status = 'ERROR' GROUP BY reason",
            (),
        )
        return {str(reason): int(n) for reason, n in rows}


@dataclass(frozen=True)
class Drain:
    """One measured drain: steady-state rate, CPU and memory of the whole process tree."""

    rate_per_s: float
    recorded: int
    expected: int
    cpu_ms_per_item: float
    cores: float
    peak_rss_mib: float
    seconds: float
    failure: str = ""
    """Empty when the drain completed; else why not (``refused (exit 2)``, ``timed out``)."""


def measure_drain(
    counted: Callable[[], int],
    times: Callable[[], Sequence[float]],
    expected: int,
    process: Worker,
    timeout_s: float,
    *,
    poll_s: float = 0.25,
    window_s: float | None = None,
) -> Drain:
    """Wait (bounded) for ``expected`` items; CPU per item between the 10% and 90% marks.

    ``counted`` polls progress, ``times`` gives every item's completion time at the end. With
    ``window_s`` the drain also ends that long after the first item (the queue still full: a
    steady state throughout), so an over-filled queue costs fill time, not drain time. A process
    that exits first (the old worker refuses ``--concurrency`` above 512 with exit 2) or a timeout
    is a :class:`Drain` with ``failure`` set, never an exception: the figure prints it.
    """
    started = time.monotonic()
    samples: list[tuple[float, float, int]] = []
    peak_kib, done, failure, first_at = 0, 0, "", 0.0
    while done < expected:
        code = process.process.poll()
        now = time.monotonic()
        if code is not None:
            failure = f"refused (exit {code})" if code == 2 else f"exited ({code})"
            break
        if now - started > timeout_s:
            failure = f"timed out after {timeout_s:.0f} s"
            break
        if window_s is not None and first_at and now - first_at >= window_s:
            break
        done = counted()
        first_at = first_at or (now if done else 0.0)
        with contextlib.suppress(RuntimeError):
            peak_kib = max(peak_kib, rss_kib(process.pid))
        samples.append((time.monotonic(), cpu_seconds(process.pid), done))
        time.sleep(poll_s)
    seconds = time.monotonic() - started
    if failure:
        return Drain(float("nan"), done, expected, float("nan"), float("nan"), 0, seconds, failure)
    low = next(s for s in samples if s[2] >= 0.1 * done)
    high = next(s for s in reversed(samples) if s[2] <= 0.9 * done)
    (t0, c0, n0), (t1, c1, n1) = low, high
    per_item = (c1 - c0) * 1000 / (n1 - n0) if n1 > n0 else float("nan")
    cores = (c1 - c0) / (t1 - t0) if t1 > t0 else float("nan")
    try:
        rate = middle_rate(times())
    except ValueError:
        rate = float("nan")
    return Drain(rate, done, expected, per_item, cores, peak_kib / 1024, seconds)


def _depth(client: redis.Redis, queue: str) -> int:
    pipe = client.pipeline(transaction=False)
    for key in [queue] + [f"{queue}\x06\x16{step}" for step in (3, 6, 9)]:
        pipe.llen(key)
    pipe.hlen("unacked")
    return sum(int(n) for n in pipe.execute())


def solo_noop_rate(
    bench: Bench, count: int, timeout_s: float = 120.0, *, evalq_config: bool = False
) -> Drain:
    """N: one ``celery worker -P solo`` draining ``count`` empty tasks (acks_late, JSON).

    By default the app is stock Celery (``bench._noop_solo_app``: default prefetch, no task
    events): the framework's own one-task-per-message rate on this Redis. ``evalq_config`` runs
    P2's ``bench._noop_app`` instead (evalq's Celery configuration: prefetch 1, task events).
    """
    module, queue = (
        ("bench._noop_app", LANE_QUEUES[Lane.BACKFILL])
        if evalq_config
        else (
            "bench._noop_solo_app",
            SOLO_NOOP_QUEUE,
        )
    )
    app = Celery("evalq-bench-fill", broker=bench.broker_url, set_as_current=False)
    app.conf.task_serializer = "json"
    with app.producer_or_acquire() as producer, producer.batch(max_size=500):
        for i in range(count):
            app.send_task(NOOP_TASK, args=(i,), queue=queue, producer=producer)
    app.close()
    argv = [sys.executable, "-m", "celery", "-A", module, "worker", "-P", "solo"]
    argv += ["-Q", queue, "--loglevel=WARNING", "--hostname=noop-solo@%h"]
    argv += ["--without-gossip", "--without-mingle"]
    process = bench.process(argv, deployment_env(bench.broker_url), "noop-solo")
    client = redis.Redis.from_url(bench.broker_url)
    samples: list[tuple[float, int]] = []
    try:

        def drained() -> int:
            left = _depth(client, queue)
            samples.append((time.monotonic(), count - left))
            return count - left

        def times() -> list[float]:
            # each sample stands for the items completed since the one before it
            out: list[float] = []
            previous = 0
            for at, done in samples:
                out.extend([at] * max(0, done - previous))
                previous = max(previous, done)
            return out

        result = measure_drain(drained, times, count, process, timeout_s, poll_s=0.01)
    finally:
        client.close()
        process.stop()
    return result


SOLO_NOOP_QUEUE = "bench.noop"
"""The queue of N's no-op tasks (not a lane: the stock app knows nothing of evalq)."""
