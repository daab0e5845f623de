"""Machinery of the fault suite: exact counts per scenario, the session table, broker checks and
a loopback TCP proxy that can cut a database away from the workers.

Counts are read straight from the store's tables (SQL, not the store API), so the suite checks
the records themselves:

- ``expected``: distinct snapshot ids the scenario enqueued;
- ``recorded``: expected ids that have an evaluation;
- ``duplicated``: evaluations beyond one per snapshot, plus metric-result rows beyond one per
  (evaluation, metric);
- ``lost``: expected ids with no evaluation once the broker holds nothing and the records have
  settled (:func:`wait_recovered`): nothing re-sends them, so lost means lost;
- ``redone``: work repeated: judge requests no record accounts for (retries included), plus
  deliveries that found their evaluation already recorded (as counted by the workers still
  alive): the evidence that the fault really hit work in flight.

``EVALQ_TEST_SOAK=1`` scales the scenarios up to the issue's soak figures (10k snapshots, 30 s
database outage); CI runs the same code at a size that keeps the suite within its time limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import redis

from producer import LANE_QUEUES
from tests.queue.queue_kit import WorkerProcess, systemone_knobs, wait_until
from worker.embedded import free_port
from worker.evaluation import Thresholds
from worker.judges.testing import JudgeServer
from worker.metric_sets import METRIC_SETS

__all__ = [
    "AGENT_METRICS",
    "CONTROLS",
    "ROWS",
    "SOAK",
    "Counts",
    "FaultWorker",
    "RecordTally",
    "TcpProxy",
    "backfill_knobs",
    "broker_backlog",
    "broker_state",
    "evaluated_at_least",
    "evaluations_in",
    "format_table",
    "recorded_requests",
    "redone",
    "report_row",
    "store_rows",
    "system_one_knobs",
    "tally",
    "wait_drained",
    "wait_recovered",
    "wait_stable",
]

SOAK = os.environ.get("EVALQ_TEST_SOAK", "") == "1"
"""Run the long variants (10k snapshots, 30 s outage) instead of the CI-sized ones."""

ROWS: list[Counts] = []
"""Every fault scenario's counts, printed as one table at the end of the session."""
CONTROLS: list[Counts] = []
"""Negative controls (configurations that are expected to lose work), printed apart."""

_HEADER = ("scenario", "expected", "recorded", "duplicated", "lost", "redone")


@dataclass(frozen=True)
class Counts:
    """One row of the fault table."""

    scenario: str
    expected: int
    recorded: int
    duplicated: int
    lost: int
    redone: int

    def cells(self) -> tuple[str, ...]:
        """The row as table cells."""
        numbers = (self.expected, self.recorded, self.duplicated, self.lost, self.redone)
        return (self.scenario, *(str(n) for n in numbers))


def format_table(rows: Iterable[Counts]) -> list[str]:
    """A fixed-width text table (header, rule, one line per row)."""
    body = [r.cells() for r in rows]
    widths = [max(len(c) for c in column) for column in zip(_HEADER, *body, strict=False)]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return " | ".join((first, *rest))

    rule = "-+-".join("-" * w for w in widths)
    return [line(_HEADER), rule, *(line(cells) for cells in body)]


def report_row(counts: Counts, *, control: bool = False) -> Counts:
    """Print one row now (visible with ``-s`` and in failure output) and keep it for the table."""
    print("\n".join(format_table([counts])))
    (CONTROLS if control else ROWS).append(counts)
    return counts


# --- reading records ------------------------------------------------------------------------


def store_rows(store_url: str, sql: str) -> list[tuple[object, ...]]:
    """Run one read-only query on the store's database (SQLite file or PostgreSQL)."""
    parts = urlsplit(store_url)
    if parts.scheme == "sqlite":
        path = store_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return list(conn.execute(sql).fetchall())
    with psycopg.connect(store_url, autocommit=True, connect_timeout=5) as conn:
        return list(conn.execute(sql).fetchall())


_EVALUATIONS = "SELECT snapshot_id, COUNT(*) FROM evaluations GROUP BY snapshot_id"
_RESULTS = """SELECT e.evaluation_id, COUNT(r.metric_id), COUNT(DISTINCT r.metric_id)
FROM evaluations e LEFT JOIN metric_results r ON r.evaluation_id = e.evaluation_id
GROUP BY e.evaluation_id"""


@dataclass(frozen=True)
class RecordTally:
    """What the store holds for one scenario's snapshot ids."""

    expected: int
    recorded: int
    duplicated: int
    lost: int
    invented: int
    incomplete: int

    def counts(self, scenario: str, redone: int) -> Counts:
        """The table row of this tally."""
        return Counts(scenario, self.expected, self.recorded, self.duplicated, self.lost, redone)


AGENT_METRICS = len(METRIC_SETS["agent"](Thresholds(0.2, 0.8)))
"""Results of one ``agent`` evaluation (the seven agent metrics and tool_execution)."""


def tally(store_url: str, expected_ids: Iterable[str], metrics_per_evaluation: int) -> RecordTally:
    """Count the evaluations and results of ``expected_ids`` in the store (see module docs)."""
    expected = set(expected_ids)
    per_snapshot = {str(sid): int(str(n)) for sid, n in store_rows(store_url, _EVALUATIONS)}
    results = [(int(str(n)), int(str(d))) for _, n, d in store_rows(store_url, _RESULTS)]
    recorded = len(expected & per_snapshot.keys())
    extra_evaluations = sum(n - 1 for n in per_snapshot.values())
    extra_results = sum(n - distinct for n, distinct in results)
    return RecordTally(
        expected=len(expected),
        recorded=recorded,
        duplicated=extra_evaluations + extra_results,
        lost=len(expected) - recorded,
        invented=len(per_snapshot.keys() - expected),
        incomplete=sum(1 for _, d in results if d != metrics_per_evaluation),
    )


def recorded_requests(store_url: str) -> int:
    """Judge requests the recorded evaluations made (``SUM(evaluations.requests)``)."""
    ((n,),) = store_rows(store_url, "SELECT COALESCE(SUM(requests), 0) FROM evaluations")
    return int(str(n))


def evaluations_in(store_url: str) -> int:
    """Evaluation rows in the store right now."""
    ((n,),) = store_rows(store_url, "SELECT COUNT(*) FROM evaluations")
    return int(str(n))


def evaluated_at_least(store_url: str, count: int) -> Callable[[], bool]:
    """A predicate for :func:`wait_until`: the store holds ``count`` evaluations or more."""
    return lambda: evaluations_in(store_url) >= count


def system_one_knobs(
    redis_url: str, store_url: str, judge: JudgeServer, **extra: str
) -> dict[str, str]:
    """queue_kit's :func:`systemone_knobs` on the fake judge, with a restore sweep every second."""
    return systemone_knobs(
        judge.base_url,
        store_url,
        redis_url,
        judge_api_key="fault-suite-key",
        restore_interval_s="1",
        **extra,
    )


def backfill_knobs(
    redis_url: str, store_url: str, judge: JudgeServer, batch_size: int
) -> dict[str, str]:
    """:func:`system_one_knobs` of the backfill fault rows: a 1 s budget, 16 in flight, and a
    visibility timeout of 8 s so that a lost worker's messages come back within the test."""
    return system_one_knobs(
        redis_url,
        store_url,
        judge,
        budget_s="1",
        concurrency="16",
        batch_size=str(batch_size),
        visibility_timeout_s="8",
    )


# --- workers --------------------------------------------------------------------------------


class FaultWorker(WorkerProcess):
    """A worker subprocess that serves ``/metrics`` on a port of its own."""

    def __init__(
        self, env: dict[str, str], log_path: Path, argv: list[str] | None, metrics_port: int
    ) -> None:
        super().__init__({**env, "EVALQ_METRICS_PORT": str(metrics_port)}, log_path, argv)
        self.metrics_port = metrics_port

    def duplicate_deliveries(self) -> int:
        """Deliveries that found their evaluation recorded (``outcome="duplicate"``); 0 if dead."""
        return self._metric_sum("evalq_evaluations_total{", 'outcome="duplicate"')

    def judge_responses(self) -> int:
        """Judge HTTP responses this worker received so far; 0 if dead."""
        return self._metric_sum("evalq_judge_http_responses_total{")

    def _metric_sum(self, prefix: str, label: str = "") -> int:
        """Sum of the ``/metrics`` samples whose line starts with ``prefix`` and holds ``label``
        (0 once the worker has exited: its counters died with it)."""
        if self.process.poll() is not None:
            return 0
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return int(
            sum(
                float(line.rpartition(" ")[2])
                for line in text.splitlines()
                if line.startswith(prefix) and label in line
            )
        )


def redone(judge_requests: int | None, store_url: str, workers: Iterable[FaultWorker]) -> int:
    """Work done more than once: judge requests no record accounts for (``None``: no judge
    server, the synthetic judge), plus duplicate deliveries seen by the workers still alive
    (a killed worker's counters die with it)."""
    extra_requests = 0 if judge_requests is None else judge_requests - recorded_requests(store_url)
    return extra_requests + sum(w.duplicate_deliveries() for w in workers)


# --- the broker -----------------------------------------------------------------------------


def _queued(client: redis.Redis) -> dict[str, int]:
    """Messages queued per non-empty lane list (all priority lists)."""
    lengths = {
        key.decode(): int(client.llen(key))
        for name in LANE_QUEUES.values()
        for key in client.scan_iter(match=f"{name}*")
        if client.type(key) == b"list"
    }
    return {key: length for key, length in lengths.items() if length}


def broker_backlog(redis_url: str) -> int:
    """Messages still with the broker: queued on any lane (all priority lists) or unacked."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        return sum(_queued(client).values()) + int(client.hlen("unacked"))
    finally:
        client.close()


def wait_drained(redis_url: str, timeout_s: float, settle_s: float = 1.0) -> None:
    """Wait until the broker holds nothing, twice ``settle_s`` apart (a pop in flight is not 0)."""

    def drained_twice() -> bool:
        if broker_backlog(redis_url) != 0:
            return False
        time.sleep(settle_s)
        return broker_backlog(redis_url) == 0

    wait_until(
        drained_twice,
        timeout_s,
        "the broker to hold no message, queued or unacked",
        lambda: broker_state(redis_url),
    )


def broker_state(redis_url: str) -> str:
    """What is left with the broker, for a failure message: queued per list, unacked by age."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        queued = _queued(client)
        now_s = float(client.time()[0])
        entries: Any = client.zrange("unacked_index", 0, -1, withscores=True)
        scores = [float(score) for _, score in entries]
        ages = f"{now_s - max(scores):.0f}-{now_s - min(scores):.0f} s old" if scores else "none"
        return f"queued {queued}, unacked {client.hlen('unacked')} ({ages})"
    finally:
        client.close()


def wait_stable(read: Callable[[], int], timeout_s: float, quiet_s: float = 1.5) -> int:
    """Wait until ``read()`` stops changing for ``quiet_s``; return the value."""
    last = [read(), time.monotonic()]

    def quiet() -> bool:
        value = read()
        if value != last[0]:
            last[:] = [value, time.monotonic()]
            return False
        return time.monotonic() - float(last[1]) >= quiet_s

    wait_until(quiet, timeout_s, "the count to settle")
    return int(last[0])


def wait_recovered(redis_url: str, store_url: str, timeout_s: float) -> int:
    """Wait until the broker holds nothing, queued or unacked, and the evaluations have settled;
    return their count. Whatever is not recorded then is lost: no step re-sends it."""
    wait_drained(redis_url, timeout_s)
    return wait_stable(lambda: evaluations_in(store_url), 30)


# --- a proxy we can cut ---------------------------------------------------------------------


class TcpProxy:
    """A TCP forwarder on 127.0.0.1 in front of ``target``; :meth:`cut` makes it vanish.

    While cut, the port refuses connections and every open connection has been aborted, which
    is what clients see when a database server goes away; :meth:`restore` listens again on the
    same port. It runs on an event loop in a daemon thread of the test process.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="proxy", daemon=True)
        self._thread.start()
        self.restore()

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def restore(self) -> None:
        """Listen (again) on :attr:`port`."""
        self._call(self._listen())

    def cut(self) -> None:
        """Stop listening and abort every forwarded connection."""
        self._call(self._cut())

    def close(self) -> None:
        """Cut and stop the loop thread."""
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Registered before connecting upstream: a connection accepted just before a cut, still
        # connecting when it came, used to survive the cut and keep forwarding through it.
        self._open.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._open.discard(writer)
            writer.transport.abort()
            return
        if writer not in self._open:  # cut while connecting upstream: it is gone
            up_writer.transport.abort()
            return
        self._open.add(up_writer)
        await asyncio.gather(
            _pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True
        )
        for end in (writer, up_writer):
            self._open.discard(end)
            end.transport.abort()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(65536):
        sink.write(chunk)
        await sink.drain()
    sink.transport.abort()
