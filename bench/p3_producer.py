"""P3: producer backfill enqueue rate vs ``apply_async`` one by one; producer memory vs input size.

Input: generated JSONL files of small OpenAI-chat traces (one per line; 10k and 1M lines), read by
the real backfill pump (``producer.run_backfill``: reader, importer, unit cut, backfill stamp).

- **Rate.** The snapshots the pump makes of the 10k-line file are enqueued twice into the private
  Redis, queue emptied in between: baseline = Celery ``send_task`` (``apply_async`` by name) one
  snapshot per call, plain Celery JSON app; measured = ``Producer.send_many(...)`` with
  ``bench.tuning.BACKFILL.batch_size`` snapshots per message (the producers' default
  ``EVALQ_BATCH_SIZE``, 8); pydantic-encoded JSON spliced into the body; publishes pipelined
  with kombu's ``Producer.batch``). Three rounds of the pair, side by side (one shot of 10k
  snapshots takes half a second, and the machine's speed moves between shots): the figure is the
  round with the median ratio, every round's ratio in the note. Target ≥ 15x.
- **Memory.** ``run_backfill`` over each file in a fresh subprocess sending with ``send_many``
  (checkpoints in a SQLite store, as the CLI does), while this process empties the queue (the
  consumers' part); the child reports its peak RSS (``VmHWM``). Target: 1M-line peak within ±10%
  of the 10k-line peak.

Run: ``.venv/bin/python bench/p3_producer.py [--quick]``
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from celery import Celery

from bench._kit import Bench, Row, load_average, main_for
from bench.tuning import BACKFILL
from producer import Lane, Producer, Snapshot, run_backfill
from producer.snapshot import EVALUATE_TASK, LANE_QUEUES
from worker.store import open_store

__all__ = ["run"]

TARGET_RATE = 15.0
TARGET_MEMORY = 0.10
BASELINE_CALLS = 3000
RATE_ROUNDS = 3
_QUEUE = LANE_QUEUES[Lane.BACKFILL]


def write_lines(path: Path, count: int) -> None:
    """``count`` small, distinct OpenAI-chat traces, one per line (fast: string templates)."""
    template = (
        '{{"id":"bf-{0}","messages":[{{"role":"user","content":"Where is order {0}?"}},'
        '{{"role":"assistant","content":"Order {0} ships tomorrow."}}]}}\n'
    )
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, count, 10_000):
            out.write("".join(template.format(i) for i in range(start, min(count, start + 10_000))))


def backfill_snapshots(path: Path) -> list[Snapshot]:
    """The snapshots the backfill pump makes of ``path`` (stamped for the backfill lane)."""
    made: list[Snapshot] = []
    run_backfill([path], made.extend)
    return made


def _empty(client_url: str) -> None:
    import redis  # noqa: PLC0415 - only the parent drains

    client = redis.Redis.from_url(client_url)
    client.delete(_QUEUE)
    client.close()


def apply_async_rate(broker_url: str, snapshots: Sequence[Snapshot]) -> float:
    """Snapshots/s of plain Celery ``send_task`` one by one (the common producer code)."""
    app = Celery("evalq-bench-apply-async", broker=broker_url, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True)
    for snapshot in snapshots[:50]:  # warm up: connection, pools, imports
        app.send_task(EVALUATE_TASK, args=(snapshot.wire(),), queue=_QUEUE)
    started = time.perf_counter()
    for snapshot in snapshots:
        app.send_task(EVALUATE_TASK, args=(snapshot.wire(),), queue=_QUEUE)
    elapsed = time.perf_counter() - started
    app.close()
    return len(snapshots) / elapsed


def rate_rounds(
    broker_url: str, made: Sequence[Snapshot], rounds: int
) -> list[tuple[float, float]]:
    """``(apply_async, send_many)`` snapshots/s per round, the queue emptied after each."""
    pairs = []
    for _ in range(rounds):
        baseline = apply_async_rate(broker_url, made[:BASELINE_CALLS])
        _empty(broker_url)
        pairs.append((baseline, send_many_rate(broker_url, made)))
        _empty(broker_url)
    return pairs


def send_many_rate(broker_url: str, snapshots: Sequence[Snapshot]) -> float:
    """Snapshots/s of the producer's bulk backfill path."""
    with Producer(broker_url) as producer:
        producer.send_many(snapshots[:64], lane=Lane.BACKFILL, batch_size=BACKFILL.batch_size)
        started = time.perf_counter()
        sent = producer.send_many(snapshots, lane=Lane.BACKFILL, batch_size=BACKFILL.batch_size)
        elapsed = time.perf_counter() - started
    return sent / elapsed


def child(path: str, broker_url: str, store_url: str) -> None:
    """Subprocess body: one backfill of ``path``; prints ``{"peak_kib", "lines_per_s"}``."""
    with Producer(broker_url) as producer, open_store(store_url) as store:
        started = time.perf_counter()
        summary = run_backfill(
            [path],
            lambda batch: producer.send_many(
                batch, lane=Lane.BACKFILL, batch_size=BACKFILL.batch_size
            ),
            store,
        )
        elapsed = time.perf_counter() - started
    status = Path("/proc/self/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    print(json.dumps({"peak_kib": peak, "lines_per_s": summary.progress.read / elapsed}))


def backfill_peak(bench: Bench, path: Path, timeout_s: float) -> tuple[int, float]:
    """Peak RSS (KiB) and lines/s of a backfill of ``path`` in a fresh process."""
    stop = threading.Event()

    def drain() -> None:  # stands in for the workers, so Redis memory stays small
        while not stop.wait(0.05):
            _empty(bench.broker_url)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    store_url = f"sqlite:///{bench.directory / f'producer-{path.stem}.db'}"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.p3_producer",
                "--child",
                str(path),
                *(bench.broker_url, store_url),
            ],
            capture_output=True,
            check=True,
            timeout=timeout_s,
        )
    finally:
        stop.set()
        drainer.join(timeout=5)
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return int(result["peak_kib"]), float(result["lines_per_s"])


def _pump_timeout_s(lines: int) -> float:
    """A bound for the backfill pump over ``lines`` lines, at a floor of 1,000 lines/s.

    A fixed 400 s cut a slow machine's 1M-line run short (~2,500 lines/s there, 5,086 on a
    medium machine) and took the whole ``run_all`` down with it.
    """
    return 120.0 + lines / 1000


def run(quick: bool) -> list[Row]:
    """Measure the enqueue ratio and the memory ratio; two table rows."""
    small, large = (500, 5000) if quick else (10_000, 1_000_000)
    with Bench("p3") as bench:
        small_path, large_path = bench.directory / "small.jsonl", bench.directory / "large.jsonl"
        write_lines(small_path, small)
        write_lines(large_path, large)
        made = backfill_snapshots(small_path)
        pairs = rate_rounds(bench.broker_url, made, 1 if quick else RATE_ROUNDS)
        baseline, measured = sorted(pairs, key=lambda p: p[1] / p[0])[len(pairs) // 2]
        size = len(made[0].model_dump_json())
        small_peak, _ = backfill_peak(bench, small_path, timeout_s=_pump_timeout_s(small))
        large_peak, lines_per_s = backfill_peak(bench, large_path, timeout_s=_pump_timeout_s(large))
    rate_ratio = measured / baseline
    memory_ratio = large_peak / small_peak
    load = load_average()
    return [
        Row(
            figure="P3 producer enqueue",
            measured=measured,
            baseline=baseline,
            ratio=rate_ratio,
            target=f">= {TARGET_RATE:.0f}",
            passed=rate_ratio >= TARGET_RATE,
            unit="snapshots/s vs apply_async one by one",
            note=f"{len(made)} backfill snapshots of {size} B JSON, "
            f"{BACKFILL.batch_size} per message; the median of {len(pairs)} rounds' ratios "
            f"({', '.join(f'{m / b:.1f}x' for b, m in pairs)})",
            load=load,
        ),
        Row(
            figure=f"P3 producer memory {large // 1000}k",
            measured=large_peak / 1024,
            baseline=small_peak / 1024,
            ratio=memory_ratio,
            target=f"1 ± {TARGET_MEMORY:.2f}",
            passed=abs(memory_ratio - 1) <= TARGET_MEMORY,
            unit=f"peak RSS MiB at {large} vs {small} lines",
            note=f"whole backfill pump at {lines_per_s:.0f} lines/s",
            load=load,
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry (``--child PATH BROKER STORE`` is the memory subprocess)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--child"]:
        child(*args[1:4])
        return 0
    return main_for("P3: producer backfill enqueue and memory", run, args)


if __name__ == "__main__":
    sys.exit(main())
