"""P5: worker RSS stays flat (±10%) from the 10k-th to the 100k-th snapshot of a backfill.

One backfill worker (the recommended backfill settings, a zero-latency System One judge server in
its own process, SQLite store) evaluates 100k distinct snapshots — short chats, the shape of P3's
backfill lines, one judge request each, so 100k fit the time budget — that a producer thread
streams onto the backfill lane with back-pressure (at most a few thousand snapshots queued, as
``evalq backfill --max-queue-depth`` keeps it). The worker's resident set (``VmRSS`` of
``/proc/<pid>/status``; the threads pool runs every task in that one process) is read when the
store first holds 10k evaluations and again at 100k.

Run: ``.venv/bin/python bench/p5_worker_memory.py [--quick]``
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence

from bench._kit import (
    Bench,
    Row,
    count_evaluations,
    load_average,
    main_for,
    queue_depth,
    rss_kib,
    snapshots,
)
from bench.tuning import BACKFILL
from producer import Lane, Producer

__all__ = ["run"]

IN_FLIGHT = 64
TARGET = 0.10
MAX_QUEUED_MESSAGES = 64
"""Back-pressure: the producer waits while more messages than this are queued."""


def _produce(bench: Bench, count: int, stop: threading.Event) -> None:
    client = bench.redis_client()
    per_message = BACKFILL.batch_size
    chunk = per_message * 16
    source = snapshots(count, "p5", small=True)
    with Producer(bench.broker_url) as producer:
        sent = 0
        while sent < count and not stop.is_set():
            if queue_depth(client, Lane.BACKFILL) >= MAX_QUEUED_MESSAGES:
                time.sleep(0.05)
                continue
            batch = [s for _, s in zip(range(min(chunk, count - sent)), source, strict=False)]
            sent += producer.send_many(batch, lane=Lane.BACKFILL, batch_size=per_message)


def run(quick: bool) -> list[Row]:
    """Measure P5; one table row."""
    first, last = (64, 192) if quick else (10_000, 100_000)
    with Bench("p5") as bench:
        judge_url = bench.judge_server(0.0)
        worker = bench.worker(judge_url, {"lanes": "backfill", **BACKFILL.env(IN_FLIGHT)})
        stop = threading.Event()
        producer = threading.Thread(target=_produce, args=(bench, last, stop), daemon=True)
        producer.start()
        samples: dict[int, int] = {}
        started = time.monotonic()
        try:
            while len(samples) < 2:
                if worker.process.poll() is not None:
                    raise RuntimeError(f"worker exited:\n{worker.log[-3000:]}")
                if time.monotonic() - started > 60 + last / 40:
                    raise TimeoutError("the backfill did not finish in time")
                done = count_evaluations(bench.store_path)
                for mark in (first, last):
                    if done >= mark and mark not in samples:
                        samples[mark] = rss_kib(worker.pid)
                time.sleep(0.2)
        finally:
            stop.set()
            producer.join(timeout=30)
        elapsed = time.monotonic() - started
    ratio = samples[last] / samples[first]
    return [
        Row(
            figure=f"P5 worker RSS {first}->{last}",
            measured=samples[last] / 1024,
            baseline=samples[first] / 1024,
            ratio=ratio,
            target=f"1 ± {TARGET:.2f}",
            passed=abs(ratio - 1) <= TARGET,
            unit=f"worker RSS MiB at snapshot {last} vs {first}",
            note=f"{last} short-chat snapshots in {elapsed:.0f} s ({last / elapsed:.0f}/s)",
            load=load_average(),
        )
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry."""
    return main_for("P5: worker memory over a long backfill", run, argv)


if __name__ == "__main__":
    sys.exit(main())
