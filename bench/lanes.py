"""Issue 17's acceptance figures: the live and backfill lanes through the commands a user runs.

Everything is started as a user starts it, with the environment holding only deployment facts
(``EVALQ_BROKER_URL``, ``EVALQ_STORE_URL``, ``EVALQ_JUDGE=systemone``, ``EVALQ_JUDGE_URL`` of the
stand-in System One server, ``EVALQ_JUDGE_API_KEY``, ``EVALQ_THRESHOLDS``) and no tuning knob:
producers are ``evalq enqueue FILE --lane live`` and ``evalq backfill PATH``, workers are
``evalq worker --lanes LANE --concurrency C`` (the virtualenv's console script; whatever processes
it starts are counted, CPU and RSS over the whole process tree). Each drain gets a fresh store
(an SQLite file, or a new PostgreSQL database on 127.0.0.1:5432 dropped afterwards) and an empty
queue filled before the worker starts, sized for ~12 s of steady state at the expected rate
``min(C/L, X0)``; throughput is the ``created_at`` rate, between the 10th and 90th percentile,
of the evaluations without an ERROR result (a TIMEOUT recorded is not throughput: such records
are named beside the rate and left out of it). In the same run:

- X0: the same lane and command with a zero-latency judge, per C;
- N: one stock ``celery worker -P solo`` draining empty tasks (acks_late, JSON) from the same
  Redis, before and after the rest (the higher counts);
- jevals: ``jevals==0.1.4``'s in-process dataset runner (its own virtualenv, bench/.venv-jevals,
  created on first use) over the same traces against the same stand-in at C=256/L=1 s and
  C=64/L=100 ms.

Targets (issue 17): live L=1 s C=256 ≥ 0.85 x 256/s and ≥ 5 x jevals; live L=100 ms C=64
≥ 0.70 x min(640/s, X0); live L=1 s C=1024 ≥ 0.85 x min(1024/s, X0); live L=1 s throughput
non-decreasing (within 5%) over C = 16, 64, 256, 1024, 2048; X0 ≥ 1.3 x N per lane; backfill
C=64 L=100 ms ≥ 0.85 x min(640/s, X0); live P95 submit → recorded ≤ L + 30 ms (L=100 ms) while a
backfill saturates the same workers (``evalq worker --lanes live,backfill``, defaults, live
snapshots submitted at 15/s with ``Producer.submit``); CPU per snapshot printed per lane. A worker
that refuses a concurrency (exit 2: the pre-17 worker's limit of 512) is printed as refused.

Run: ``.venv/bin/python bench/lanes.py [--quick] [--store sqlite|postgresql|both]`` (about 15-25
minutes for both stores; ``--quick`` is a smoke run of 3-5 minutes whose figures mean nothing).
``--curve 64,256`` measures only those live concurrencies; ``--live-only`` skips the backfill lane
and the P95 figure.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench._kit import (
    API_KEY,
    CLI_COMMAND,
    REPO,
    Bench,
    Drain,
    JudgeQueueProbe,
    RecordStore,
    Row,
    Worker,
    deployment_env,
    fresh_postgres,
    load_average,
    measure_drain,
    percentile,
    queue_depth,
    snapshots,
    solo_noop_rate,
    table,
    wait_for,
    write_traces,
)
from producer import Lane, Producer

__all__ = ["main", "measure", "run"]

CURVE_C = (16, 64, 256, 1024, 2048)
QUICK_CURVE_C = (64, 256, 1024)
LIVE_LATENCY_MS = 1000.0
SHORT_LATENCY_MS = 100.0
HEADLINE_C = 256
SHORT_C = 64
SHORT_CURVE_MAX_C = 256
WIDE_C = 1024
BACKFILL_C = 64
X0_OVER_N = 1.3
JEVALS_FACTOR = 5.0
MONOTONE_SLACK = 0.95
P95_SLACK_MS = 30.0
LIVE_RATE_PER_S = 15.0
WARM_UP = 16
JEVALS_VERSION = "0.1.4"
JEVALS_VENV = REPO / "bench" / ".venv-jevals"
STORES = ("sqlite", "postgresql")


@dataclass(frozen=True)
class Sizes:
    """How much work each drain gets (full run or ``--quick`` smoke run)."""

    steady_s: float
    cap: int
    per_c: float
    noop: int
    live_submits: int
    backfill_cap: int


FULL = Sizes(steady_s=12.0, cap=30_000, per_c=4.0, noop=6000, live_submits=240, backfill_cap=40_000)
QUICK = Sizes(steady_s=2.0, cap=1500, per_c=1.25, noop=300, live_submits=30, backfill_cap=4000)


def count_for(expected_per_s: float, concurrency: int, sizes: Sizes) -> int:
    """Items for ``steady_s`` between the 10% and 90% marks and several waves of C."""
    steady = expected_per_s * sizes.steady_s / 0.8
    return int(min(sizes.cap, max(sizes.per_c * concurrency, steady, 100)))


@dataclass(frozen=True)
class Point:
    """One drain of one lane at one (C, L) on one store."""

    drain: Drain
    errors: dict[str, int] = field(default_factory=dict)
    fill_s: float = 0.0

    @property
    def rate(self) -> float:
        """Steady-state evaluations/s without an ERROR result (NaN when the drain failed)."""
        return self.drain.rate_per_s

    def note(self) -> str:
        """What the table's note says about this drain."""
        d = self.drain
        if d.failure:
            return d.failure
        text = (
            f"{d.recorded} records, {d.cpu_ms_per_item:.2f} ms CPU each, {d.cores:.2f} cores, "
            f"RSS {d.peak_rss_mib:.0f} MiB"
        )
        if self.errors:
            text += f", ERROR results {dict(sorted(self.errors.items()))} (not in the rate)"
        return text


@dataclass
class StoreRun:
    """Every drain of one store: the live curve, the short-latency point, the backfill lane."""

    kind: str
    x0: dict[int, Point] = field(default_factory=dict)
    slow: dict[int, Point] = field(default_factory=dict)
    fast: dict[int, Point] = field(default_factory=dict)
    """L = 100 ms drains by C (C <= 256: above it the ideal is past any X0)."""
    backfill_x0: Point | None = None
    backfill_short: Point | None = None
    p95_ms: float = math.nan
    p95_note: str = ""
    p95_ok: bool = False

    @property
    def short(self) -> Point | None:
        """The L = 100 ms, C = 64 drain."""
        return self.fast.get(SHORT_C)


@dataclass(frozen=True)
class Baselines:
    """The store-independent measurements: N before/after and jevals."""

    noop_before: Drain
    noop_after: Drain
    jevals: dict[tuple[int, float], tuple[float, str]]

    @property
    def n(self) -> float:
        """N: the higher of the two no-op drains (the stricter comparison)."""
        rates = [d.rate_per_s for d in (self.noop_before, self.noop_after) if not d.failure]
        return max(rates) if rates else math.nan

    def noop_cpu_ms(self) -> float:
        """CPU ms per no-op task of the faster drain."""
        best = max((self.noop_before, self.noop_after), key=lambda d: d.rate_per_s or 0.0)
        return best.cpu_ms_per_item


class Lanes:
    """The services of one run (Redis, stand-in judges at 0, 100 and 1000 ms) and its drains."""

    def __init__(self, bench: Bench, sizes: Sizes) -> None:
        if not CLI_COMMAND.exists():
            raise RuntimeError(f"{CLI_COMMAND} is missing: pip install -e . in this virtualenv")
        self.bench = bench
        self.sizes = sizes
        self.judges = {
            ms: bench.judge_server(ms) for ms in (0.0, SHORT_LATENCY_MS, LIVE_LATENCY_MS)
        }
        self.client = bench.redis_client()

    @contextlib.contextmanager
    def store(self, kind: str, tag: str) -> Iterator[str]:
        """A fresh store URL for one drain."""
        if kind == "sqlite":
            yield f"sqlite:///{self.bench.directory / f'{tag}.db'}"
        else:
            with fresh_postgres(tag.replace("-", "_")) as url:
                yield url

    def _command(self, argv: list[str], env: dict[str, str], tag: str, timeout_s: float) -> float:
        """Run a producer command to completion (bounded); returns its seconds."""
        log = self.bench.directory / f"{tag}-producer.log"
        started = time.monotonic()
        with log.open("wb") as out:
            done = subprocess.run(
                argv,
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
        if done.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(argv[1:3])} exited {done.returncode}:\n{tail}")
        return time.monotonic() - started

    def drain(
        self, kind: str, lane: Lane, concurrency: int, latency_ms: float, expected_per_s: float
    ) -> Point:
        """Fill the lane with ``evalq enqueue``/``evalq backfill``, then drain it with a worker."""
        tag = f"{kind[:2]}-{lane.value[:2]}-c{concurrency}-l{latency_ms:.0f}"
        count = count_for(expected_per_s, concurrency, self.sizes)
        self.client.flushall()
        with self.store(kind, tag) as url:
            traces = write_traces(self.bench.directory / f"{tag}.jsonl", count, tag)
            env = deployment_env(self.bench.broker_url, url, self.judges[latency_ms])
            if lane is Lane.LIVE:
                fill = [str(CLI_COMMAND), "enqueue", str(traces), "--lane", "live"]
            else:
                fill = [str(CLI_COMMAND), "backfill", str(traces)]
            fill_s = self._command(fill, env, tag, timeout_s=60 + count / 200)
            argv = [str(CLI_COMMAND), "worker", "--lanes", lane.value]
            argv += ["--concurrency", str(concurrency)]
            worker = self.bench.process(argv, env, tag)
            records = RecordStore(url)
            timeout_s = 60 + 2.5 * count / max(1.0, expected_per_s)
            try:
                drain = _measure(records, count, worker, timeout_s, self.sizes.steady_s / 0.8)
                errors = records.error_reasons() if not drain.failure else {}
            finally:
                worker.stop()
        if drain.failure and not drain.failure.startswith("refused"):
            print(f"[{tag}: {drain.failure}]\n{worker.log[-2000:]}", file=sys.stderr, flush=True)
        print(
            f"[{tag}: {drain.rate_per_s:.1f}/s {drain.failure} ({drain.recorded} of {count}, "
            f"filled in {fill_s:.1f} s)]",
            file=sys.stderr,
            flush=True,
        )
        return Point(drain, errors, fill_s)

    def live_under_backfill(self, kind: str, backfill_per_s: float) -> tuple[float, str, bool]:
        """P95 submit → recorded of live snapshots at 15/s while a backfill saturates the workers.

        The README's deployment shape, defaults: one ``evalq worker --lanes live,backfill``
        serves both lanes; ``evalq backfill PATH`` fills the backfill lane first, deep enough that
        it is still queued when the last live snapshot is recorded.
        """
        tag = f"{kind[:2]}-p95"
        submit_s = self.sizes.live_submits / LIVE_RATE_PER_S
        count = int(min(self.sizes.backfill_cap, max(2000, backfill_per_s * (submit_s + 40))))
        self.client.flushall()
        with self.store(kind, tag) as url:
            traces = write_traces(self.bench.directory / f"{tag}.jsonl", count, f"{tag}-bf")
            env = deployment_env(self.bench.broker_url, url, self.judges[SHORT_LATENCY_MS])
            self._command([str(CLI_COMMAND), "backfill", str(traces)], env, tag, 60 + count / 200)
            argv = [str(CLI_COMMAND), "worker", "--lanes", "live,backfill"]
            worker = self.bench.process(argv, env, tag)
            records = RecordStore(url)
            try:
                wait_for(lambda: _alive(worker) and records.count() > 0, 60, "backfill records")
                with JudgeQueueProbe(self.judges[SHORT_LATENCY_MS]) as judge_queue:
                    sent, still_queued = self._submit_live(records, worker, tag)
                wait_for(
                    lambda: _alive(worker) and len(records.created(f"{tag}-live-")) >= len(sent),
                    60,
                    "every live snapshot recorded",
                    poll_s=0.2,
                )
                created = records.created(f"{tag}-live-")
            finally:
                worker.stop()
        latencies_ms = [(created[trace] - at) * 1000 for trace, at in sent.items()]
        p95 = percentile(latencies_ms, 0.95)
        note = (
            f"{len(latencies_ms)} live at {LIVE_RATE_PER_S:.0f}/s (Producer.submit), "
            f"P50 {percentile(latencies_ms, 0.5):.0f} ms, max {max(latencies_ms):.0f} ms; "
            f"{count} backfill snapshots, messages still queued at the end: {still_queued}; "
            f"{judge_queue.note()}"
        )
        return p95, note, p95 <= SHORT_LATENCY_MS + P95_SLACK_MS and still_queued > 0

    def _submit_live(
        self, records: RecordStore, worker: Worker, tag: str
    ) -> tuple[dict[str, float], int]:
        """Warm up, then submit live snapshots at a steady rate; send times by trace id."""
        sent: dict[str, float] = {}
        with Producer(self.bench.broker_url) as producer:
            for snapshot in snapshots(WARM_UP, f"{tag}-warm-", Lane.LIVE):
                producer.submit(snapshot)
            producer.flush(10.0)
            wait_for(
                lambda: _alive(worker) and len(records.created(f"{tag}-warm-")) >= WARM_UP,
                60,
                "the warm-up live snapshots",
                poll_s=0.1,
            )
            started = time.monotonic()
            live = snapshots(self.sizes.live_submits, f"{tag}-live-", Lane.LIVE)
            for i, snapshot in enumerate(live):
                delay_s = started + i / LIVE_RATE_PER_S - time.monotonic()
                if delay_s > 0:
                    time.sleep(delay_s)
                at = time.time()
                if producer.submit(snapshot):
                    sent[snapshot.trace_id] = at
            producer.flush(10.0)
        return sent, queue_depth(self.client, Lane.BACKFILL)

    def jevals(self, concurrency: int, latency_ms: float) -> tuple[float, str]:
        """jevals' in-process runner over the same traces at (C, L); (rate, note)."""
        python = _jevals_python()
        if isinstance(python, str):
            return math.nan, python
        tag = f"jevals-c{concurrency}-l{latency_ms:.0f}"
        expected = min(concurrency / (latency_ms / 1000), 150.0)
        count = count_for(expected, concurrency, self.sizes)
        traces = write_traces(self.bench.directory / f"{tag}.jsonl", count, tag)
        argv = [str(python), str(REPO / "bench" / "_jevals_runner.py")]
        argv += ["--url", self.judges[latency_ms], "--concurrency", str(concurrency)]
        argv += ["--traces", str(traces)]
        env = {**os.environ, "JEVALS_BENCH_KEY": API_KEY}
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=60 + count / 20, check=False
            )
        except subprocess.TimeoutExpired:
            return math.nan, "jevals runner timed out"
        if done.returncode != 0:
            return math.nan, f"jevals runner exited {done.returncode}: {done.stderr[-300:]!r}"
        result = json.loads(done.stdout.strip().splitlines()[-1])
        note = (
            f"jevals {JEVALS_VERSION} aevaluate_dataset, {result['traces']} traces, "
            f"{result['requests_per_trace']:.2f} requests each, {result['errors']} errors"
            + (f" ({result['first_error']})" if result["first_error"] else "")
        )
        print(f"[{tag}: {result['rate_per_s']:.1f}/s]", file=sys.stderr, flush=True)
        return float(result["rate_per_s"]), note


def _alive(worker: Worker) -> bool:
    """True while ``worker`` runs; raises (with its log) when it exited."""
    code = worker.process.poll()
    if code is not None:
        raise RuntimeError(f"worker exited ({code}):\n{worker.log[-2000:]}")
    return True


def _measure(
    records: RecordStore, count: int, worker: Worker, timeout_s: float, window_s: float
) -> Drain:
    return measure_drain(
        records.count,
        lambda: list(records.created(completed=True).values()),
        count,
        worker,
        timeout_s,
        window_s=window_s,
    )


def _jevals_python() -> Path | str:
    """bench/.venv-jevals's python with jevals installed (created on first use), or why not."""
    python = JEVALS_VENV / "bin" / "python"
    probe = f"import importlib.metadata as m; assert m.version('jevals') == '{JEVALS_VERSION}'"
    check = [str(python), "-c", probe]
    if (
        python.exists()
        and subprocess.run(check, capture_output=True, timeout=60, check=False).returncode == 0
    ):
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(JEVALS_VENV)], check=True, timeout=120)
        pip = [str(python), "-m", "pip", "install", "-q", f"jevals=={JEVALS_VERSION}"]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=600, check=False)
    except (subprocess.SubprocessError, OSError) as exc:
        return f"could not create {JEVALS_VENV.name}: {type(exc).__name__}"
    if done.returncode != 0:
        return f"pip install jevals=={JEVALS_VERSION} exited {done.returncode}"
    return python


# --- the run ------------------------------------------------------------------------------------


def measure_store(
    lanes: Lanes, kind: str, curve: Sequence[int], n: float, *, live_only: bool = False
) -> StoreRun:
    """Every drain of one store, X0 of a (lane, C) before the drains that are compared with it."""
    result = StoreRun(kind)
    guess = 1.5 * n if n == n else 500.0  # X0 is expected near 1.3 N or above
    for c in curve:
        result.x0[c] = lanes.drain(kind, Lane.LIVE, c, 0.0, _guess(result.x0, guess))
    # A C whose X0 failed (refused) is sized from the best X0 so far, not from the N guess:
    # the same command refuses again, and filling for 1.5 N only costs time.
    known = _guess(result.x0, guess) / 1.5
    for c in curve:
        expected = _expected(result.x0[c], c, LIVE_LATENCY_MS, known)
        result.slow[c] = lanes.drain(kind, Lane.LIVE, c, LIVE_LATENCY_MS, expected)
    if SHORT_C not in result.x0:
        result.x0[SHORT_C] = lanes.drain(kind, Lane.LIVE, SHORT_C, 0.0, _guess(result.x0, guess))
    for c in sorted({SHORT_C, *(c for c in curve if c <= SHORT_CURVE_MAX_C)}):
        expected = _expected(result.x0[c], c, SHORT_LATENCY_MS, guess)
        result.fast[c] = lanes.drain(kind, Lane.LIVE, c, SHORT_LATENCY_MS, expected)
    if live_only:
        result.p95_note = "not measured (--live-only)"
        return result
    result.backfill_x0 = lanes.drain(kind, Lane.BACKFILL, BACKFILL_C, 0.0, guess)
    result.backfill_short = lanes.drain(
        kind,
        Lane.BACKFILL,
        BACKFILL_C,
        SHORT_LATENCY_MS,
        _expected(result.backfill_x0, BACKFILL_C, SHORT_LATENCY_MS, guess),
    )
    bf_rate = (
        result.backfill_x0.rate if result.backfill_x0.rate == result.backfill_x0.rate else guess
    )
    try:
        result.p95_ms, result.p95_note, result.p95_ok = lanes.live_under_backfill(kind, bf_rate)
    except (RuntimeError, TimeoutError) as exc:
        result.p95_note = f"not measured: {str(exc).splitlines()[0]}"
    return result


def _guess(done: dict[int, Point], default: float) -> float:
    """The fill of the next X0 drain: 1.5 x the best X0 so far (the window bounds a drain)."""
    rates = [p.rate for p in done.values() if p.rate == p.rate]
    return 1.5 * max(rates) if rates else default


def _expected(x0: Point, concurrency: int, latency_ms: float, guess: float) -> float:
    """min(C/L, X0): the rate a drain at latency L can reach (X0 guessed when it failed)."""
    ideal = concurrency / (latency_ms / 1000)
    return min(ideal, x0.rate if x0.rate == x0.rate else guess)


def _reachable_note(jevals_note: str, jevals_rate: float) -> str:
    """jevals' note, with what even an ideal worker (C/L) would read against it: the factor is
    out of any worker's reach once jevals passes C / (5 L)."""
    ideal = _ideal(HEADLINE_C, LIVE_LATENCY_MS)
    if not jevals_rate > 0:
        return jevals_note
    return f"{jevals_note}; the ideal C/L ({ideal:.0f}/s) is {ideal / jevals_rate:.2f}x jevals"


def _ideal(concurrency: int, latency_ms: float) -> float:
    return concurrency / (latency_ms / 1000)


def _ratio_row(
    figure: str, point: Point | None, baseline: float, target: float, unit: str, extra: str = ""
) -> Row:
    """A ``measured / baseline ≥ target`` row (FAIL with the reason when not measured)."""
    measured = point.rate if point is not None else math.nan
    ratio = measured / baseline if baseline and baseline == baseline else math.nan
    note = point.note() if point is not None else "not measured"
    return Row(
        figure=figure,
        measured=measured,
        baseline=baseline,
        ratio=ratio,
        target=f">= {target:g}",
        passed=ratio == ratio and ratio >= target,
        unit=unit,
        note=note + (f"; {extra}" if extra else ""),
        load=load_average(),
    )


def store_rows(run: StoreRun, base: Baselines) -> list[Row]:
    """The table rows of one store's figures."""
    k = "sqlite" if run.kind == "sqlite" else "pg"
    n = base.n
    rows: list[Row] = []
    slow = run.slow.get(HEADLINE_C)
    rows.append(
        _ratio_row(
            f"{k} live C256 L1s/ideal",
            slow,
            _ideal(HEADLINE_C, LIVE_LATENCY_MS),
            0.85,
            "records/s vs C/L",
        )
    )
    jevals_rate, jevals_note = base.jevals.get((HEADLINE_C, LIVE_LATENCY_MS), (math.nan, "not run"))
    rows.append(
        _ratio_row(
            f"{k} live C256 L1s/jevals",
            slow,
            jevals_rate,
            JEVALS_FACTOR,
            "records/s vs jevals traces/s",
            _reachable_note(jevals_note, jevals_rate),
        )
    )
    x0_short = run.x0.get(SHORT_C)
    short_base = min(_ideal(SHORT_C, SHORT_LATENCY_MS), x0_short.rate if x0_short else math.nan)
    rows.append(
        _ratio_row(
            f"{k} live C64 L100ms",
            run.short,
            short_base,
            0.70,
            "records/s vs min(640/s, X0)",
            _x0_note(x0_short),
        )
    )
    x0_wide = run.x0.get(WIDE_C)
    wide_base = min(_ideal(WIDE_C, LIVE_LATENCY_MS), x0_wide.rate if x0_wide else math.nan)
    rows.append(
        _ratio_row(
            f"{k} live C1024 L1s",
            run.slow.get(WIDE_C),
            wide_base,
            0.85,
            "records/s vs min(1024/s, X0)",
            _x0_note(x0_wide),
        )
    )
    rows.append(_monotone_row(k, run))
    x0s = {c: run.x0[c].rate for c in (SHORT_C, HEADLINE_C, WIDE_C) if c in run.x0}
    worst = min(x0s.values(), default=math.nan) if all(v == v for v in x0s.values()) else math.nan
    rows.append(
        Row(
            figure=f"{k} live X0/N",
            measured=worst,
            baseline=n,
            ratio=worst / n,
            target=f">= {X0_OVER_N:g}",
            passed=worst / n >= X0_OVER_N,
            unit="lowest X0 records/s over C=64,256,1024 vs no-op tasks/s",
            note=", ".join(f"C={c} {_x0_note(run.x0[c])}" for c in x0s) + "; " + _n_note(base),
            load=load_average(),
        )
    )
    rows.append(
        _cpu_row(f"{k} live CPU/snapshot", run.x0.get(HEADLINE_C), base, "live, L=0, C=256")
    )
    bf_x0 = run.backfill_x0
    bf_base = min(_ideal(BACKFILL_C, SHORT_LATENCY_MS), bf_x0.rate if bf_x0 else math.nan)
    rows.append(
        _ratio_row(
            f"{k} backfill C64 L100ms",
            run.backfill_short,
            bf_base,
            0.85,
            "records/s vs min(640/s, X0)",
            _x0_note(bf_x0),
        )
    )
    rows.append(
        _ratio_row(
            f"{k} backfill X0/N",
            bf_x0,
            n,
            X0_OVER_N,
            "X0 records/s (C=64) vs no-op tasks/s",
            _n_note(base),
        )
    )
    rows.append(_cpu_row(f"{k} backfill CPU/snapshot", bf_x0, base, "backfill, L=0, C=64"))
    rows.append(
        Row(
            figure=f"{k} live P95 under bf",
            measured=run.p95_ms,
            baseline=SHORT_LATENCY_MS,
            ratio=run.p95_ms / SHORT_LATENCY_MS,
            target=f"<= +{P95_SLACK_MS:.0f} ms",
            passed=run.p95_ok,
            unit="ms submit->recorded P95 vs judge latency",
            note=run.p95_note,
            load=load_average(),
        )
    )
    return rows


def _x0_note(x0: Point | None) -> str:
    if x0 is None:
        return "X0 not measured"
    return f"X0 {x0.drain.failure}" if x0.drain.failure else f"X0 {x0.rate:.1f}/s"


def _n_note(base: Baselines) -> str:
    return (
        f"N = higher of {base.noop_before.rate_per_s:.0f}/s before and "
        f"{base.noop_after.rate_per_s:.0f}/s after (celery -P solo, stock app)"
    )


def _monotone_row(k: str, run: StoreRun) -> Row:
    """L=1 s throughput over the curve: every step's ratio ≥ 0.95 (non-decreasing within 5%)."""
    cs = sorted(run.slow)
    steps = [run.slow[b].rate / run.slow[a].rate for a, b in itertools.pairwise(cs)]
    worst = min(steps) if steps and all(s == s for s in steps) else math.nan
    shown = ", ".join(
        f"C={c} {run.slow[c].rate:.1f}/s"
        if not run.slow[c].drain.failure
        else f"C={c} {run.slow[c].drain.failure}"
        for c in cs
    )
    return Row(
        figure=f"{k} live L1s monotone C",
        measured=worst,
        baseline=1.0,
        ratio=worst,
        target=f">= {MONOTONE_SLACK:g}",
        passed=worst == worst and worst >= MONOTONE_SLACK,
        unit="lowest T(C next)/T(C) at L=1 s",
        note=shown,
        load=load_average(),
    )


def _cpu_row(figure: str, point: Point | None, base: Baselines, where: str) -> Row:
    """CPU ms per snapshot of the whole worker tree (printed; the no-op task's as baseline)."""
    measured = point.drain.cpu_ms_per_item if point is not None else math.nan
    noop = base.noop_cpu_ms()
    return Row(
        figure=figure,
        measured=measured,
        baseline=noop,
        ratio=measured / noop if noop else math.nan,
        target="printed",
        passed=measured == measured,
        unit=f"CPU ms per snapshot ({where}) vs per no-op task",
        note=point.note() if point is not None else "not measured",
        load=load_average(),
    )


def _point_note(name: str, point: Point) -> str:
    """What a curve row says about one of its drains: its failure or its ERROR results."""
    if point.drain.failure:
        return f"{name} {point.drain.failure}"
    if point.errors:
        return f"{name} ERROR results {dict(sorted(point.errors.items()))} (not in the rate)"
    return ""


def curve_table(run: StoreRun) -> str:
    """The live curve: per C, X0 and the L=1 s rate, ratios to ideal and to min(ideal, X0), CPU.

    L = 100 ms (C <= 256) is shown with its ratio to min(C/L, X0) in its own columns.
    """
    head = (
        f"{'C':>5} {'L=0 (X0)/s':>11} {'L=1s /s':>9} {'/ideal':>7} {'/min(ideal,X0)':>15} "
        f"{'CPU ms L=0':>11} {'CPU ms L=1s':>12} {'L=100ms /s':>11} {'/min(ideal,X0)':>15}  note"
    )
    lines = [
        f"live lane curve, {run.kind} (evalq worker --lanes live --concurrency C)",
        head,
        "-" * len(head),
    ]
    for c in sorted(run.slow):
        x0, slow, fast = run.x0[c], run.slow[c], run.fast.get(c)
        ideal = _ideal(c, LIVE_LATENCY_MS)
        capped = min(ideal, x0.rate) if x0.rate == x0.rate else math.nan
        fast_text = f"{'-':>11} {'-':>15}"
        if fast is not None:
            fast_capped = min(_ideal(c, SHORT_LATENCY_MS), x0.rate)
            fast_text = f"{fast.rate:>11.1f} {fast.rate / fast_capped:>15.2f}"
        points = (("L=0", x0), ("L=1s", slow), ("L=100ms", fast))
        note = "; ".join(filter(None, (_point_note(n, p) for n, p in points if p is not None)))
        lines.append(
            f"{c:>5} {x0.rate:>11.1f} {slow.rate:>9.1f} {slow.rate / ideal:>7.2f} "
            f"{slow.rate / capped:>15.2f} {x0.drain.cpu_ms_per_item:>11.2f} "
            f"{slow.drain.cpu_ms_per_item:>12.2f} {fast_text}  {note}"
        )
    return "\n".join(lines)


def measure(
    quick: bool,
    stores: Sequence[str],
    curve: Sequence[int] | None = None,
    *,
    live_only: bool = False,
) -> tuple[list[Row], list[str]]:
    """The whole run: N before, jevals, every store's drains, N after; (rows, curve tables)."""
    sizes = QUICK if quick else FULL
    curve = curve or (QUICK_CURVE_C if quick else CURVE_C)
    with Bench("lanes") as bench:
        lanes = Lanes(bench, sizes)
        before = solo_noop_rate(bench, sizes.noop)
        print(f"[N before: {before.rate_per_s:.1f}/s]", file=sys.stderr, flush=True)
        lanes.client.flushall()
        configured = solo_noop_rate(bench, sizes.noop, evalq_config=True)
        lanes.client.flushall()
        jevals = {
            (c, ms): lanes.jevals(c, ms)
            for c, ms in ((HEADLINE_C, LIVE_LATENCY_MS), (SHORT_C, SHORT_LATENCY_MS))
        }
        runs = [
            measure_store(lanes, kind, curve, before.rate_per_s, live_only=live_only)
            for kind in stores
        ]
        after = solo_noop_rate(bench, sizes.noop)
        print(f"[N after: {after.rate_per_s:.1f}/s]", file=sys.stderr, flush=True)
    base = Baselines(before, after, jevals)
    rows = [
        Row(
            figure="N no-op celery -P solo",
            measured=base.n,
            baseline=base.n,
            ratio=1.0,
            target="printed",
            passed=base.n == base.n,
            unit="tasks/s, the higher of before/after",
            note=_n_note(base) + f"; {base.noop_cpu_ms():.2f} ms CPU per task",
            load=load_average(),
        ),
        Row(
            figure="N' evalq config -P solo",
            measured=configured.rate_per_s,
            baseline=base.n,
            ratio=configured.rate_per_s / base.n,
            target="printed",
            passed=not configured.failure,
            unit="no-op tasks/s under evalq's Celery config vs N",
            note="bench._noop_app (P2's baseline app: prefetch 1, task events), once, after N "
            f"before; {configured.cpu_ms_per_item:.2f} ms CPU per task",
            load=load_average(),
        ),
    ]
    for (c, ms), (rate, note) in jevals.items():
        rows.append(
            Row(
                figure=f"jevals C{c} L{ms / 1000:g}s",
                measured=rate,
                baseline=_ideal(c, ms),
                ratio=rate / _ideal(c, ms),
                target="printed",
                passed=rate == rate,
                unit="traces/s vs C/L",
                note=note + "; its httpx client keeps httpx's default limit of 100 connections",
                load=load_average(),
            )
        )
    for run in runs:
        rows.extend(store_rows(run, base))
    return rows, [curve_table(run) for run in runs]


def run(quick: bool) -> list[Row]:
    """Both stores (``bench/run_all.py``): the rows; the curve tables are printed here."""
    rows, curves = measure(quick, STORES)
    for curve in curves:
        print(curve + "\n")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``--quick``, ``--store sqlite|postgresql|both``; exit 1 on a FAIL."""
    parser = argparse.ArgumentParser(description="Issue 17 lane figures (user-facing commands)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks it runs")
    parser.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument(
        "--curve", help="comma list of live concurrencies (default 16,64,256,1024,2048)"
    )
    parser.add_argument(
        "--live-only", action="store_true", help="skip the backfill lane and the P95 figure"
    )
    args = parser.parse_args(argv)
    stores = STORES if args.store == "both" else (args.store,)
    concurrencies = [int(c) for c in args.curve.split(",")] if args.curve else None
    started = time.monotonic()
    rows, curves = measure(args.quick, stores, concurrencies, live_only=args.live_only)
    mode = ", quick mode" if args.quick else ""
    print(f"evalq lanes ({os.cpu_count()} CPUs{mode}, {time.monotonic() - started:.0f} s)")
    print(table(rows))
    for text in curves:
        print("\n" + text)
    return 0 if args.quick or all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
