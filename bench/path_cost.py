"""Where an evaluation's CPU goes, by part, beside Celery's no-op ceiling: what X0 >= 1.3 N asks.

Issue 17's zero-latency figure asks the worker's rate X0 (every core of the machine, the judge
answering at once) to be at least 1.3 x N, one ``celery worker -P solo`` process draining empty
tasks. When the machine's cores are the bound, that is a bound on CPU per evaluation:
X0 = cores / (CPU per evaluation), so X0 >= 1.3 N needs CPU per evaluation <= cores / (1.3 N),
the *budget* this script prints, for the worker and everything an evaluation makes the machine
do (the judge stand-in's side of each request, Redis). Measured in one run:

1. N, as ``bench/lanes.py`` measures it, and its CPU per no-op task.
2. X0: ``evalq enqueue --lane live`` + ``evalq worker --lanes live --concurrency 256`` (the
   default command, SQLite, a System One stand-in at 0 ms): CPU per evaluation over the worker's
   processes, and the stand-in's CPU per request over the same drain.
3. The worker's message path *without the broker* (:class:`worker.handling.Handler` on a
   :class:`worker.runtime.Runtime` in this process, live deliveries handed over 64 at a time, a
   fresh SQLite store per round, this process's cycle collector tuned as a worker's): this
   process's CPU per evaluation (event loop and store threads), first with the System One judge
   over HTTP to the stand-in, then with the **synthetic** judge in-process. The difference is the
   judge exchange's client side.
4. The store's write alone (``bench/store_writes.py``'s full write, SQLite).

Parts derived from those: *broker and consumer* = X0's CPU per evaluation - the path over HTTP
(approximate: the drain runs on a saturated machine, the path beside an idle core); *decode,
engine, records* = the path with the synthetic judge - the store write. Rounds alternate the
two judges (the machine's speed drifts); medians are printed. No targets: figures are printed.

Run: ``.venv/bin/python bench/path_cost.py [--quick]`` (about two minutes; ``--quick`` checks it
runs).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import store_writes
from bench._kit import (
    API_KEY,
    Bench,
    Row,
    cpu_seconds_matching,
    load_average,
    main_for,
    snapshots,
    solo_noop_rate,
)
from bench.lanes import FULL as LANE_SIZES
from bench.lanes import HEADLINE_C, X0_OVER_N, Lanes
from bench.lanes import QUICK as QUICK_LANE_SIZES
from producer import Lane
from worker import runtime
from worker.judges import SyntheticJudge
from worker.runtime import Runtime
from worker.settings import Settings, load_settings
from worker.store import open_store

__all__ = ["main", "run"]

GROUP = store_writes.GROUP
"""Deliveries handed to the handler at once (a micro-batch of a loaded consumer)."""
JUDGES = ("systemone", "synthetic")
EXPECTED_X0_PER_S = 700.0
"""A guess of the X0 drain's rate, which sizes its queue (``--quick``: a tenth of it)."""


@dataclass(frozen=True)
class PathCost:
    """One in-process round: CPU µs per evaluation here, and the stand-in's per request."""

    cpu_us: float
    stand_in_us: float


def _stand_in_cpu_s() -> float:
    """CPU seconds so far of the judge stand-ins this process started (their own processes)."""
    return cpu_seconds_matching(b"worker.judges.testing", parent=os.getpid())


def _settings(judge_url: str) -> Settings:
    return load_settings(
        concurrency=GROUP,
        processes=1,
        judge="systemone",
        judge_url=judge_url,
        judge_api_key=API_KEY,
        thresholds="0.2,0.8",
    )


@contextlib.contextmanager
def _runtime(settings: Settings, judge: str, store_url: str) -> Iterator[Runtime]:
    with open_store(store_url) as store:
        injected = SyntheticJudge() if judge == "synthetic" else None
        rt = Runtime(settings, store=store, judge=injected)
        try:
            yield rt
        finally:
            rt.close()


def path_once(settings: Settings, judge: str, count: int, tag: str) -> PathCost:
    """Hand ``count`` live deliveries to a fresh runtime, ``GROUP`` at a time; CPU per evaluation
    of this process (the first group, the warm-up, not counted)."""
    deliveries = [store_writes.delivery(s.wire(), Lane.LIVE) for s in snapshots(count, tag)]
    with (
        tempfile.TemporaryDirectory() as directory,
        _runtime(settings, judge, f"sqlite:///{Path(directory) / 'path.db'}") as rt,
    ):
        store_writes.handle_all(rt, deliveries[:GROUP])
        started, stand_in = time.process_time(), _stand_in_cpu_s()
        store_writes.handle_all(rt, deliveries[GROUP:])
        cpu_s, stand_in_s = time.process_time() - started, _stand_in_cpu_s() - stand_in
    measured = len(deliveries) - GROUP
    return PathCost(cpu_s * 1e6 / measured, stand_in_s * 1e6 / measured)


def measure_paths(judge_url: str, sizes: store_writes.Sizes) -> dict[str, PathCost]:
    """Median over the rounds of each judge's path, the judges alternating within a round.

    This process's cycle collector is tuned as a worker process tunes its own first
    (:func:`worker.runtime.tune_gc`): at CPython's default threshold the collector took 400-530
    µs per evaluation of this path, which no worker pays.
    """
    runtime.tune_gc(runtime.GC_GEN0_THRESHOLD)
    settings = _settings(judge_url)
    costs: dict[str, list[PathCost]] = {judge: [] for judge in JUDGES}
    for round_no in range(sizes.rounds):
        for judge in JUDGES:
            costs[judge].append(path_once(settings, judge, sizes.count, f"path{round_no}{judge}"))
    return {
        judge: PathCost(
            statistics.median(c.cpu_us for c in cs), statistics.median(c.stand_in_us for c in cs)
        )
        for judge, cs in costs.items()
    }


@dataclass(frozen=True)
class Measured:
    """Everything one run measures (µs of CPU per item unless named otherwise)."""

    n_per_s: float
    noop_us: float
    x0_per_s: float
    x0_us: float
    x0_stand_in_us: float
    paths: dict[str, PathCost]
    store_us: float

    @property
    def budget_us(self) -> float:
        """CPU per evaluation at which the machine's cores give X0 = 1.3 N."""
        return (os.cpu_count() or 1) * 1e6 / (X0_OVER_N * self.n_per_s)


def _x0(bench: Bench, quick: bool, expected: float) -> tuple[float, float, float]:
    """The default live command's zero-latency drain: (records/s, worker CPU µs per evaluation,
    the stand-in's CPU µs per request over the same drain)."""
    lanes = Lanes(bench, QUICK_LANE_SIZES if quick else LANE_SIZES)
    stand_in = _stand_in_cpu_s()
    point = lanes.drain("sqlite", Lane.LIVE, HEADLINE_C, 0.0, expected)
    stand_in_s = _stand_in_cpu_s() - stand_in
    drain = point.drain
    if drain.failure:
        raise RuntimeError(f"the X0 drain did not complete: {drain.failure}")
    # the stand-ins' CPU over the whole fill and drain, per record: the other two stand-ins idle
    return drain.rate_per_s, drain.cpu_ms_per_item * 1000, stand_in_s * 1e6 / drain.recorded


def measure(quick: bool) -> Measured:
    """N, the X0 drain, the in-process paths and the store write, in that order, one run."""
    sizes = store_writes.QUICK if quick else store_writes.FULL
    with Bench("path-cost") as bench:
        noop = solo_noop_rate(bench, (QUICK_LANE_SIZES if quick else LANE_SIZES).noop)
        bench.redis_client().flushall()
        expected = EXPECTED_X0_PER_S / 10 if quick else EXPECTED_X0_PER_S
        x0_per_s, x0_us, x0_stand_in_us = _x0(bench, quick, expected)
        paths = measure_paths(bench.judge_server(0.0), sizes)
    items = store_writes.capture(sizes.count)
    writes = store_writes.measure("sqlite", items, sizes.rounds)
    return Measured(
        noop.rate_per_s,
        noop.cpu_ms_per_item * 1000,
        x0_per_s,
        x0_us,
        x0_stand_in_us,
        paths,
        writes["full"].cpu_us,
    )


def _row(figure: str, us: float, m: Measured, note: str) -> Row:
    return Row(
        figure=figure,
        measured=us,
        baseline=m.budget_us,
        ratio=us / m.budget_us,
        target="printed",
        passed=us == us,  # printed figures; a NaN (a failed part) shows as FAIL
        unit="CPU µs per evaluation vs the X0 >= 1.3 N budget",
        note=note,
        load=load_average(),
    )


def rows_for(m: Measured) -> list[Row]:
    """The budget first, then the whole drain, then its parts."""
    http, synthetic = m.paths["systemone"], m.paths["synthetic"]
    cores = os.cpu_count() or 1
    return [
        _row(
            "budget: X0 = 1.3 N",
            m.budget_us,
            m,
            f"{cores} cores / (1.3 x N {m.n_per_s:.1f}/s); N's own CPU {m.noop_us:.0f} µs per "
            "no-op task (celery -P solo, stock app)",
        ),
        _row(
            "X0 drain: worker + stand-in",
            m.x0_us + m.x0_stand_in_us,
            m,
            f"live C={HEADLINE_C}, SQLite: {m.x0_per_s:.1f}/s = {m.x0_per_s / m.n_per_s:.2f} N; "
            f"the worker's processes {m.x0_us:.0f}, the stand-in {m.x0_stand_in_us:.0f}",
        ),
        _row(
            "path, no broker, HTTP judge",
            http.cpu_us,
            m,
            f"Handler + Runtime in one process, {GROUP} live deliveries at a time, SQLite; "
            f"the stand-in's side {http.stand_in_us:.0f} µs per request",
        ),
        _row(
            "part: broker, consumer",
            m.x0_us - http.cpu_us,
            m,
            "derived: X0 drain's worker CPU - the path without broker (a saturated machine vs "
            "one with a free core: approximate)",
        ),
        _row(
            "part: judge client",
            http.cpu_us - synthetic.cpu_us,
            m,
            "derived: the path over HTTP - the path with the synthetic judge in-process",
        ),
        _row(
            "part: store write (SQLite)",
            m.store_us,
            m,
            "bench/store_writes.py's full write: 64 evaluations per transaction",
        ),
        _row(
            "part: engine, records",
            synthetic.cpu_us - m.store_us,
            m,
            f"derived: the path with the synthetic judge ({synthetic.cpu_us:.0f}) - the store "
            "write; the synthetic judge's own answers included",
        ),
    ]


def run(quick: bool) -> list[Row]:
    """Measure once; the rows."""
    return rows_for(measure(quick))


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry."""
    return main_for("Where an evaluation's CPU goes, vs the X0 >= 1.3 N budget", run, argv)


if __name__ == "__main__":
    sys.exit(main())
