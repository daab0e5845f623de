"""P4: a judge that never answers — every evaluation is still recorded within budget + 50 ms.

The "judge" is a TCP server on loopback that accepts each connection, reads the request and never
writes a byte. One live worker (``EVALQ_BUDGET_S=1``, 16 evaluations in flight) gets 16 snapshots,
one per message, 25 ms apart, so all 16 hang at once. For each, the time from the producer's send
to the record's ``created_at`` must stay within budget + 50 ms: queue wait, decoding, the budget
itself (the engine cancels the hanging request at its deadline and marks the metrics TIMEOUT) and
the hand-over to the store (``created_at`` is stamped as the write begins) are all inside that
window. The figure also checks that every judged metric's result is ``ERROR``/``TIMEOUT``; a
judge-free metric (``tool_execution``) asks nothing and is decided as usual.

Run: ``.venv/bin/python bench/p4_stalled_judge.py [--quick]``
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime

from bench._kit import Bench, Row, load_average, main_for, snapshots, wait_recorded
from bench.tuning import LIVE
from producer import Lane, Producer
from worker.metric_sets import judge_free_metric_ids

__all__ = ["run", "silent_server"]

BUDGET_S = 1.0
SLACK_S = 0.050
IN_FLIGHT = 16
SPACING_S = 0.025
"""Live traffic at 40 snapshots/s: all 16 hang at the same time (budget 1 s), none waits."""


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A loopback HTTP "server" that reads requests and never answers; yields its base URL."""
    loop = asyncio.new_event_loop()
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # keep the connection open, say nothing
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    server = loop.run_until_complete(asyncio.start_server(hold, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, name="silent-judge", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:

        async def shut() -> None:
            server.close()
            for writer in held:
                writer.close()

        asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


def _records(path: str) -> tuple[dict[str, float], set[tuple[str, str]]]:
    """Created times by trace id; the distinct (status, reason) of judged metrics' results."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        created = {
            trace: datetime.fromisoformat(at).timestamp()
            for trace, at in conn.execute(
                "SELECT s.trace_id, e.created_at FROM evaluations e "
                "JOIN snapshots s ON s.snapshot_id = e.snapshot_id"
            )
        }
        outcomes = {
            (status, reason)
            for metric_id, status, reason in conn.execute(
                "SELECT DISTINCT metric_id, status, reason FROM metric_results"
            )
            if metric_id not in judge_free_metric_ids()
        }
    return created, outcomes


def run(quick: bool) -> list[Row]:
    """Measure P4; one table row."""
    count = 4 if quick else IN_FLIGHT
    with Bench("p4") as bench, silent_server() as judge_url:
        settings = {"lanes": "live", "budget_s": str(BUDGET_S), **LIVE.env(IN_FLIGHT)}
        worker = bench.worker(judge_url, settings)
        worker.wait_ready(bench.broker_url)
        sent: dict[str, float] = {}
        with Producer(bench.broker_url) as producer:
            # Steady state: one evaluation first, so the judge client's one-time set-up (its
            # connection pool and TLS context, ~40 ms of loop time) is not in the figure.
            producer.enqueue(next(snapshots(1, "p4-warm-up", Lane.LIVE)))
            wait_recorded(bench.store_path, 1, timeout_s=30, worker=worker)
            for snapshot in snapshots(count, "p4", Lane.LIVE):
                sent[snapshot.trace_id] = time.time()
                producer.enqueue(snapshot)
                time.sleep(SPACING_S)
        wait_recorded(bench.store_path, count + 1, timeout_s=30, worker=worker)
        created, outcomes = _records(str(bench.store_path))
    worst_s = max(created[trace] - at for trace, at in sent.items())  # warm-up not in `sent`
    limit_s = BUDGET_S + SLACK_S
    return [
        Row(
            figure="P4 judge never answers",
            measured=worst_s * 1000,
            baseline=BUDGET_S * 1000,
            ratio=worst_s / BUDGET_S,
            target=f"<= +{SLACK_S * 1000:.0f} ms",
            passed=worst_s <= limit_s and outcomes == {("ERROR", "TIMEOUT")},
            unit="ms send->recorded (worst) vs budget",
            note=f"{count} evaluations (+1 warm-up), judged metrics' results {sorted(outcomes)}",
            load=load_average(),
        )
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry."""
    return main_for("P4: a judge that never answers", run, argv)


if __name__ == "__main__":
    sys.exit(main())
