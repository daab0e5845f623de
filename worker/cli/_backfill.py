"""``evalq backfill PATH…``: stream files onto the backfill lane, resumable, with progress."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from producer.snapshot import LANE_QUEUES, Lane

from ._app import err, out
from ._common import (
    broker_down,
    connected,
    invalid,
    print_rejections,
    require_broker,
    say_empty,
    settings,
)
from ._options import FormatOpt, MetricSetOpt, UnitOpt

if TYPE_CHECKING:
    from producer import BackfillSummary
    from worker.settings import Settings

__all__ = ["EPILOG", "backfill"]

EPILOG = (
    "Exit status: 0 done; 1 done with rejected lines or failed snapshots (ERROR results or "
    "dead letters so far), an unreachable broker, or stopped by a send or store failure "
    "(the message names the --resume id); 2 invalid options, inputs or resume id; 130/143 "
    "interrupted by Ctrl-C/SIGTERM (--resume ID continues)."
)
"""The ``--help`` epilog: exit statuses."""

BackfillBatchOpt = Annotated[
    int,
    typer.Option(
        "--batch-size",
        envvar="EVALQ_BACKFILL_BATCH_SIZE",
        min=1,
        help="Snapshots per enqueue batch, one checkpoint each (per message: EVALQ_BATCH_SIZE)",
    ),
]
MaxDepthOpt = Annotated[
    int,
    typer.Option(
        "--max-depth",
        envvar="EVALQ_BACKFILL_MAX_DEPTH",
        min=1,
        help="Pause while the backfill queue holds this many messages (Redis)",
    ),
]
RateOpt = Annotated[
    float | None,
    typer.Option(
        "--rate", envvar="EVALQ_BACKFILL_RATE", min=0.001, help="Max snapshots per second"
    ),
]


@dataclass(frozen=True)
class _Backfill:
    """One ``evalq backfill`` invocation's options; ``chosen`` is the id to resume with."""

    paths: list[Path]
    chosen: str
    resume: str | None
    backfill_id: str | None
    batch_size: int
    max_depth: int
    rate: float | None
    fmt: str
    unit: str


class _Terminated(BaseException):
    """SIGTERM or Ctrl-C during a backfill: unwind so the resume id is printed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class _Signal:
    """The SIGTERM or SIGINT received, if any. The handler also raises, to stop a wait at once;
    a raise that lands in a finalizer or in C code calling back into Python (pydantic's
    validation) is swallowed there, so the run asks this before and after each batch (Ctrl-C
    too: Python's own KeyboardInterrupt would leave no such trace)."""

    received: int | None = None

    def handle(self, signum: int, _frame: object) -> None:
        self.received = signum
        raise _Terminated(signum)

    def stop_requested(self, _progress: object) -> bool:
        return self.received is not None


def backfill(
    paths: Annotated[list[Path], typer.Argument(exists=True, readable=True, help="Files or dirs")],
    *,
    resume: Annotated[
        str | None,
        typer.Option("--resume", envvar="EVALQ_BACKFILL_RESUME", help="Continue backfill ID"),
    ] = None,
    backfill_id: Annotated[
        str | None,
        typer.Option("--id", envvar="EVALQ_BACKFILL_ID", help="Backfill id (default: derived)"),
    ] = None,
    batch_size: BackfillBatchOpt = 500,
    max_depth: MaxDepthOpt = 20_000,
    rate: RateOpt = None,
    fmt: FormatOpt = "auto",
    unit: UnitOpt = "invocation",
    metric_set: MetricSetOpt = None,
) -> None:
    """Stream PATHS onto the backfill lane: batched, back-pressured, resumable, with progress."""
    from producer import backfill_id_for, expand_paths  # noqa: PLC0415 - fast --help

    config = settings(metric_set=metric_set)
    url = require_broker(config)
    try:
        sources = expand_paths(paths)  # a FIFO or device is refused here, before anything
    except (ValueError, FileNotFoundError) as exc:
        invalid(f"invalid backfill: {exc}")
    chosen = resume or backfill_id
    if chosen is None:
        chosen = backfill_id_for(sources, format=fmt, unit=unit, metric_set=config.metric_set)
    job = _Backfill(paths, chosen, resume, backfill_id, batch_size, max_depth, rate, fmt, unit)
    received = _Signal()
    previous = {n: signal.signal(n, received.handle) for n in (signal.SIGTERM, signal.SIGINT)}
    try:
        summary = _run_backfill(job, config, url, received)
    except _Terminated as stop:  # SIGINT too: the handler replaces KeyboardInterrupt here
        _stopped_by(stop.signum, chosen)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received.received is not None:  # its raise was swallowed; the run stopped at a batch
        _stopped_by(received.received, chosen)
    _print_backfill(summary, chosen)
    if summary.progress.read == 0 and summary.progress.rejected == 0 and resume is None:
        say_empty(" ".join(map(str, paths)), "traces", "enqueue")
    if summary.progress.rejected or summary.progress.failed:
        raise typer.Exit(1)


def _stopped_by(signum: int, chosen: str) -> NoReturn:
    what = "interrupted" if signum == signal.SIGINT else "terminated"
    invalid(f"{what}; continue with --resume {chosen}", 128 + signum)


def _hint(job: _Backfill) -> str:
    if job.resume:
        return f"continue with --resume {job.chosen}"
    return f"nothing sent for backfill {job.chosen}: run the same command again"


def _run_backfill(job: _Backfill, config: Settings, url: str, stop: _Signal) -> BackfillSummary:
    """One backfill run with the store, the producer and the progress bar open."""
    from producer import (  # noqa: PLC0415 - fast --help
        BackfillError,
        BrokerError,
        RedisQueueDepth,
        rich_progress,
        run_backfill,
        store_counts,
    )
    from worker.broker import is_redis  # noqa: PLC0415
    from worker.store import StoreError, open_store  # noqa: PLC0415

    depth = RedisQueueDepth(url, LANE_QUEUES[Lane.BACKFILL]) if is_redis(url) else None
    per_message = config.batch_size
    try:
        with (
            open_store(config.store_url) as store,
            connected(config, url, _hint(job)) as producer,
            rich_progress(out) as progress,
        ):
            return run_backfill(
                job.paths,
                # send_many: the ids are not needed here (the workers compute them)
                lambda batch: producer.send_many(batch, lane=Lane.BACKFILL, batch_size=per_message),
                store,
                backfill_id=job.backfill_id,
                resume=job.resume,
                batch_size=job.batch_size,
                max_queue_depth=job.max_depth if depth is not None else None,
                queue_depth=depth,
                rate_limit_per_s=job.rate,
                progress=progress,
                evaluated=store_counts(store),
                format=job.fmt,
                unit=job.unit,
                metric_set=config.metric_set,
                should_stop=stop.stop_requested,
            )
    except (BackfillError, StoreError) as exc:
        err.print(
            f"[red]backfill stopped:[/red] {exc.code}; continue with --resume {job.chosen}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    except ValueError as exc:  # BACKFILL_MISMATCH, UNKNOWN_BACKFILL, INPUT_CHANGED, --format
        invalid(f"invalid backfill: {exc}")
    except BrokerError as exc:  # the queue depth could not be read, even after retries
        broker_down(exc, f"continue with --resume {job.chosen}")
    finally:
        if depth is not None:
            depth.close()


def _print_backfill(summary: BackfillSummary, chosen: str) -> None:
    p = summary.progress
    evaluated = "?" if p.evaluated is None else p.evaluated
    failed = "?" if p.failed is None else p.failed
    out.print(
        f"backfill {p.backfill_id}: read {p.read}, enqueued {p.enqueued}, "
        f"already sent {p.skipped}, sampled out {p.sampled_out}, rejected lines {p.rejected}, "
        f"not ready {p.not_ready}; evaluated so far {evaluated}, failed {failed}",
        highlight=False,
        soft_wrap=True,
    )
    print_rejections(summary.rejected_examples, p.rejected)
    if summary.stopped:
        err.print(
            f"stopped early; continue with --resume {chosen}", highlight=False, soft_wrap=True
        )
    if p.failed:
        err.print(
            f"{p.failed} snapshot(s) of this backfill failed (ERROR results or dead letters): "
            "see `evalq status` and `evalq redrive`",
            highlight=False,
            soft_wrap=True,
        )
