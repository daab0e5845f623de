"""Execution models side by side: evalq's consumer, a celery-batches prototype, Celery's no-op.

Issue 17's comparison (docs/concurrency.md, "Execution model: what we tried"). Live-lane style:
one snapshot per message, 64 evaluations in flight over the machine's cores, a queue filled
before the workers start, a judge server (System One wire format) at ``--latency-ms``:

- ``evalq``: ``evalq worker --lanes live --concurrency 64`` with defaults (one consumer process
  per core, 64 split between them);
- ``batches`` (``batches-N``: ``flush_every = N``, default 16): the prototype
  :mod:`bench.alt_celery_batches` (an alternative measured and not kept), as many
  ``celery -P threads`` processes as evalq starts, each with its share of 64 threads and prefetch;
- ``noop``: Celery's stock consumer and ``-P solo`` running a task that does nothing
  (:mod:`bench._noop_app`), the same number of processes: Celery's own cost per message;
- ``evalq-plain`` / ``evalq-no-events`` / ``evalq-linger``: evalq's worker app run like the
  prototype (``celery -A`` per core), as it is, without task events, or with a 10 ms intake linger
  (:mod:`bench._evalq_variant_app`): what explains the difference;
- ``noop-intake``: evalq's consumer with a handler that acks at once
  (:mod:`bench._noop_intake_app`): the consumer-level hand-off's own cost per message.

Each prints the drain rate between the 10th and 90th percentile of completions and the workers'
CPU (every process and thread, the judge server excluded) per message over the same span.
Models and latencies are run in the order given, ``--repeat`` times, interleaved.

Run: ``.venv/bin/python -m bench.execution_models --models evalq,batches,noop --latency-ms 0,100``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from celery import Celery

from bench._kit import (
    NOOP_TASK,
    Bench,
    Worker,
    count_evaluations,
    cpu_seconds,
    created_times,
    load_average,
    middle_rate,
    queue_depth,
    snapshots,
)
from producer import Lane, Producer
from producer.snapshot import LANE_QUEUES
from worker.running import worker_argv
from worker.settings import load_settings

__all__ = ["Measured", "measure"]

IN_FLIGHT = 64
PROCESSES = len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Measured:
    """One drain: messages/s (10-90%) and worker CPU ms per message over the same span."""

    model: str
    latency_ms: float
    count: int
    rate_per_s: float
    cpu_ms: float
    load: str


def _shares(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _span(
    done: Callable[[], int], count: int, workers: Sequence[Worker], timeout_s: float
) -> tuple[float, float, float, float]:
    """(t0, n0, cpu0) at >= 10% done and (t1, n1, cpu1) at >= 90%: the CPU per message."""
    marks: list[tuple[float, int, float]] = []
    deadline = time.monotonic() + timeout_s
    for fraction in (0.1, 0.9):
        while (n := done()) < fraction * count:
            for worker in workers:
                if worker.process.poll() is not None:
                    raise RuntimeError(f"worker exited:\n{worker.log[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{n} of {count} done")
            time.sleep(0.05)
        marks.append((time.monotonic(), n, sum(cpu_seconds(w.pid) for w in workers)))
    (t0, n0, c0), (t1, n1, c1) = marks
    return t0, t1, (c1 - c0) / (n1 - n0) * 1000, float(n1 - n0)


def _fill_live(broker_url: str, count: int, prefix: str) -> None:
    with Producer(broker_url) as producer:
        producer.send_many(snapshots(count, prefix, Lane.LIVE))


def _drain_store(
    bench: Bench, workers: list[Worker], count: int, model: str, latency_ms: float
) -> Measured:
    store = bench.store_path
    timeout_s = 120 + count / 20
    _, _, cpu_ms, _ = _span(lambda: count_evaluations(store), count, workers, timeout_s)
    deadline = time.monotonic() + timeout_s
    while count_evaluations(store) < count:
        if time.monotonic() > deadline:
            raise TimeoutError("not every snapshot was recorded")
        time.sleep(0.1)
    rate = middle_rate([at for at, _ in created_times(store)])
    return Measured(model, latency_ms, count, rate, cpu_ms, load_average())


def _evalq(bench: Bench, latency_ms: float, count: int) -> Measured:
    judge = bench.judge_server(latency_ms)
    _fill_live(bench.broker_url, count, "em")
    argv = [sys.executable, "-m", "worker.cli", "worker", "--lanes", "live"]
    argv += ["--concurrency", str(IN_FLIGHT)]
    worker = bench.worker(judge, {}, argv)
    return _drain_store(bench, [worker], count, "evalq", latency_ms)


def _celery_workers(
    bench: Bench,
    judge: str | None,
    app_module: str,
    lanes: str,
    replace: Mapping[str, str | None],
    extra_env: Mapping[str, str],
) -> list[Worker]:
    """``celery -A app_module worker`` once per core, each with its share of the concurrency."""
    workers = []
    os.environ.update(extra_env)  # the bench's worker environment starts from this one
    try:
        for index, share in enumerate(_shares(IN_FLIGHT, PROCESSES)):
            env_settings = {"lanes": lanes, "concurrency": share, "processes": 1}
            env = bench.worker_env(judge, env_settings)
            settings = load_settings(
                **{
                    k.removeprefix("EVALQ_").lower(): v
                    for k, v in env.items()
                    if k.startswith("EVALQ_")
                }
            )
            argv = [sys.executable, "-m", "celery", "-A", app_module]
            for given in worker_argv(settings, f"{app_module}-{index}@%h"):
                arg = replace.get(given, given)
                if arg is not None:
                    argv.append(arg)
            workers.append(bench.worker(judge, env_settings, argv))
    finally:
        for key in extra_env:
            os.environ.pop(key, None)
    return workers


def _batches(bench: Bench, latency_ms: float, count: int, flush_every: int = 16) -> Measured:
    judge = bench.judge_server(latency_ms)
    _fill_live(bench.broker_url, count, "em")
    threads = {"--pool=solo": "--pool=threads"}
    env = {"BENCH_FLUSH_EVERY": str(flush_every)}
    workers = _celery_workers(bench, judge, "bench.alt_celery_batches", "live", threads, env)
    name = "batches" if flush_every == 16 else f"batches-{flush_every}"
    return _drain_store(bench, workers, count, name, latency_ms)


def _variant(name: str) -> Callable[[Bench, float, int], Measured]:
    def run(bench: Bench, latency_ms: float, count: int) -> Measured:
        judge = bench.judge_server(latency_ms)
        _fill_live(bench.broker_url, count, "em")
        no_events = "no-events" in name.split("+")
        replace: dict[str, str | None] = {"--task-events": None} if no_events else {}
        env = {"BENCH_VARIANT": name}
        workers = _celery_workers(bench, judge, "bench._evalq_variant_app", "live", replace, env)
        return _drain_store(bench, workers, count, f"evalq-{name}", latency_ms)

    return run


def _noop(
    bench: Bench, latency_ms: float, count: int, app_module: str = "bench._noop_app"
) -> Measured:
    app = Celery("evalq-bench-fill", broker=bench.broker_url, set_as_current=False)
    with app.producer_or_acquire() as producer, producer.batch(max_size=500):
        for i in range(count):
            app.send_task(NOOP_TASK, args=(i,), queue=LANE_QUEUES[Lane.BACKFILL], producer=producer)
    app.close()
    workers = _celery_workers(bench, None, app_module, "backfill", {}, {})
    client = bench.redis_client()

    def done() -> int:
        return count - (queue_depth(client, Lane.BACKFILL) + int(client.hlen("unacked")))

    t0, t1, cpu_ms, span = _span(done, count, workers, 120 + count / 20)
    model = "noop" if app_module == "bench._noop_app" else "noop-intake"
    return Measured(model, latency_ms, count, span / (t1 - t0), cpu_ms, load_average())


def _noop_intake(bench: Bench, latency_ms: float, count: int) -> Measured:
    return _noop(bench, latency_ms, count, "bench._noop_intake_app")


MODELS: dict[str, Callable[[Bench, float, int], Measured]] = {
    "evalq": _evalq,
    "batches": _batches,
    "noop": _noop,
    "noop-intake": _noop_intake,
    "evalq-plain": _variant("plain"),
    "evalq-no-events": _variant("no-events"),
    "evalq-linger": _variant("linger"),
    "evalq-commit-linger": _variant("commit-linger"),
}


def measure(model: str, latency_ms: float, count: int) -> Measured:
    """One drain of ``count`` messages by ``model`` in a fresh bench (Redis, store, judge)."""
    run = MODELS.get(model)
    if run is None and model.startswith("batches-"):
        run = partial(_batches, flush_every=int(model.removeprefix("batches-")))
    run = run or _variant(model.removeprefix("evalq-"))
    with Bench(f"em-{model}") as bench:
        return run(bench, latency_ms, count)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: one line per drain."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default="evalq,batches,noop",
        help=f"comma list of {', '.join(MODELS)}, batches-N (flush_every N), "
        "evalq-VARIANT[+VARIANT] (bench/_evalq_variant_app.py)",
    )
    parser.add_argument("--latency-ms", default="0,100")
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--count-store",
        default=None,
        help="append the workers' store-call counts to this file (bench apps only)",
    )
    args = parser.parse_args(argv)
    if args.count_store:
        os.environ["BENCH_COUNT_FILE"] = args.count_store
    print(f"{PROCESSES} processes, {IN_FLIGHT} in flight, {args.count} messages", flush=True)
    for _ in range(args.repeat):
        for latency_ms in (float(x) for x in args.latency_ms.split(",")):
            for model in args.models.split(","):
                if model.startswith("noop") and latency_ms != float(args.latency_ms.split(",")[0]):
                    continue  # no judge: one no-op drain per round
                m = measure(model, latency_ms, args.count)
                print(
                    f"{m.model:<8} L={m.latency_ms:>5.0f} ms  {m.rate_per_s:7.1f} msg/s  "
                    f"{m.cpu_ms:5.2f} ms CPU/msg  load {m.load}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
