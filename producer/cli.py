"""``evalq``: the command line. A thin face over ``producer`` and ``worker.ops``.

Every flag has an environment twin: flags that are settings read ``EVALQ_<NAME>`` through
``worker.settings.Settings`` (the flag wins); command-only flags name their variable in ``--help``.
Invalid configuration exits with status 2 and a message naming the variable.
"""

from __future__ import annotations

import json
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from producer.snapshot import LANE_QUEUES, Lane, OutcomeEvent

__all__ = ["app", "main"]

app = typer.Typer(
    name="evalq",
    help="Evaluate what AI agents already did: snapshots on a queue, JEV metrics, records.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_out = Console()
_err = Console(stderr=True)

LanesOpt = Annotated[
    str | None,
    typer.Option("--lanes", help="Comma list of live,backfill,outcomes [env: EVALQ_LANES]"),
]
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        "--concurrency", help="Judge requests in flight per process [env: EVALQ_CONCURRENCY]"
    ),
]


def _settings(**overrides: Any) -> Any:
    from worker.settings import ConfigError, load_settings  # noqa: PLC0415 - fast --help

    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        _err.print(f"[red]invalid configuration:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None


def _broker(settings: Any) -> str:
    from worker.settings import ConfigError  # noqa: PLC0415 - fast --help

    try:
        url: str = settings.require_broker()
    except ConfigError as exc:
        _err.print(f"[red]invalid configuration:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    return url


@app.command()
def worker(
    *,
    lanes: LanesOpt = None,
    concurrency: ConcurrencyOpt = None,
    pool: Annotated[
        str | None, typer.Option("--pool", help="threads | prefork | solo [env: EVALQ_POOL]")
    ] = None,
    loglevel: Annotated[
        str | None, typer.Option("--loglevel", help="Log level [env: EVALQ_LOG_LEVEL]")
    ] = None,
    hostname: Annotated[
        str | None,
        typer.Option("--hostname", envvar="EVALQ_WORKER_HOSTNAME", help="Celery node name"),
    ] = None,
) -> None:
    """Run a worker (threads pool); with no flags it consumes every lane."""
    from worker.ops import run_worker  # noqa: PLC0415 - fast --help
    from worker.settings import ConfigError  # noqa: PLC0415

    settings = _settings(lanes=lanes, concurrency=concurrency, pool=pool, log_level=loglevel)
    _broker(settings)
    try:
        run_worker(settings, hostname=hostname)
    except ConfigError as exc:
        _err.print(f"[red]invalid configuration:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None


FormatOpt = Annotated[
    str, typer.Option("--format", envvar="EVALQ_FORMAT", help="Trace format (auto-detected)")
]
UnitOpt = Annotated[
    str,
    typer.Option("--unit", envvar="EVALQ_UNIT", help="invocation | session | tool_call"),
]


@app.command()
def enqueue(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    *,
    lane: Annotated[
        str | None,
        typer.Option(
            "--lane", envvar="EVALQ_ENQUEUE_LANE", help="live | backfill (default: the snapshot's)"
        ),
    ] = None,
    fmt: FormatOpt = "auto",
    unit: UnitOpt = "invocation",
    metric_set: Annotated[
        str | None,
        typer.Option("--metric-set", help="agent | agent+trajectory [env: EVALQ_METRIC_SET]"),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Snapshots per backfill message [env: EVALQ_BATCH_SIZE]"),
    ] = None,
) -> None:
    """Read FILE into snapshots and enqueue them (backfill lane: batched)."""
    from producer import ImportErrorReport  # noqa: PLC0415 - fast --help
    from worker.ops import producer_for, snapshots_for  # noqa: PLC0415

    settings = _settings(metric_set=metric_set, batch_size=batch_size)
    chosen = _lane(lane)
    report = ImportErrorReport()
    per_message = settings.batch_size if chosen is Lane.BACKFILL else 1
    with producer_for(settings, _broker(settings)) as producer:
        snapshots = snapshots_for(file, settings, report=report, format=fmt, unit=unit)
        ids = producer.enqueue_many(snapshots, lane=chosen, batch_size=per_message)
    _out.print(f"enqueued {len(ids)} snapshot(s); rejected lines: {report.rejected_count}")
    for rejected in report.rejected[:20]:
        _err.print(f"  {rejected}", highlight=False)


@app.command()
def backfill(
    paths: Annotated[list[Path], typer.Argument(exists=True, help="Files or directories")],
    *,
    resume: Annotated[
        str | None,
        typer.Option("--resume", envvar="EVALQ_BACKFILL_RESUME", help="Continue backfill ID"),
    ] = None,
    backfill_id: Annotated[
        str | None,
        typer.Option("--id", envvar="EVALQ_BACKFILL_ID", help="Name this backfill"),
    ] = None,
    max_queue_depth: Annotated[
        int,
        typer.Option(
            "--max-queue-depth",
            envvar="EVALQ_BACKFILL_MAX_QUEUE_DEPTH",
            help="Pause while the backfill queue holds this many messages (Redis)",
        ),
    ] = 20_000,
    rate_limit: Annotated[
        float | None,
        typer.Option(
            "--rate-limit", envvar="EVALQ_BACKFILL_RATE_LIMIT", help="Snapshots per second"
        ),
    ] = None,
    fmt: FormatOpt = "auto",
    unit: UnitOpt = "invocation",
    metric_set: Annotated[
        str | None,
        typer.Option("--metric-set", help="agent | agent+trajectory [env: EVALQ_METRIC_SET]"),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Snapshots per message [env: EVALQ_BATCH_SIZE]"),
    ] = None,
) -> None:
    """Stream PATHS onto the backfill lane: batched, back-pressured, resumable, with progress."""
    from producer._backfill import (  # noqa: PLC0415 - fast --help
        BackfillError,
        RedisQueueDepth,
        rich_progress,
        run_backfill,
        store_counts,
    )
    from worker.app import is_redis  # noqa: PLC0415
    from worker.ops import producer_for  # noqa: PLC0415
    from worker.store import open_store  # noqa: PLC0415

    settings = _settings(metric_set=metric_set, batch_size=batch_size)
    url = _broker(settings)
    depth = RedisQueueDepth(url, LANE_QUEUES[Lane.BACKFILL]) if is_redis(url) else None
    with open_store(settings.store_url) as store, producer_for(settings, url) as producer:

        def send(batch: Any) -> None:
            producer.enqueue_many(batch, lane=Lane.BACKFILL, batch_size=settings.batch_size)

        try:
            with rich_progress(_out) as progress:
                summary = run_backfill(
                    paths,
                    send,
                    store,
                    backfill_id=backfill_id,
                    resume=resume,
                    max_queue_depth=max_queue_depth if depth else None,
                    queue_depth=depth,
                    rate_limit_per_s=rate_limit,
                    progress=progress,
                    evaluated=store_counts(store),
                    format=fmt,
                    unit=unit,
                    metric_set=settings.metric_set,
                )
        except BackfillError as exc:
            resume_id = exc.progress.backfill_id
            _err.print(f"[red]backfill stopped:[/red] {exc.code}; resume with --resume {resume_id}")
            raise typer.Exit(1) from None
        finally:
            if depth is not None:
                depth.close()
    done = summary.progress
    _out.print(
        f"backfill {summary.backfill_id}: read {done.read}, enqueued {done.enqueued}, "
        f"rejected {done.rejected}, not ready {done.not_ready}"
    )


def _lane(value: str | None) -> Lane | None:
    if value is None:
        return None
    if value not in (Lane.LIVE, Lane.BACKFILL):
        _err.print("--lane: expected live or backfill")
        raise typer.Exit(2)
    return Lane(value)


@app.command()
def outcome(
    *,
    file: Annotated[
        Path | None,
        typer.Option("--file", envvar="EVALQ_OUTCOME_FILE", help="JSONL of outcome events"),
    ] = None,
    event_id: Annotated[str | None, typer.Option("--event-id")] = None,
    trace_id: Annotated[str | None, typer.Option("--trace-id")] = None,
    name: Annotated[str | None, typer.Option("--name")] = None,
    value: Annotated[str, typer.Option("--value", help="JSON value (default null)")] = "null",
    observed_at: Annotated[
        str | None, typer.Option("--observed-at", help="ISO time (default now)")
    ] = None,
    session_id: Annotated[str | None, typer.Option("--session-id")] = None,
    unit_event_id: Annotated[str | None, typer.Option("--unit-event-id")] = None,
) -> None:
    """Send outcome events (from --file, or one from the flags) on the outcomes lane."""
    from producer._backfill import send_outcomes  # noqa: PLC0415 - fast --help
    from worker.ops import producer_for  # noqa: PLC0415

    settings = _settings()
    single = None if file else _flag_event(locals())
    with producer_for(settings, _broker(settings)) as producer:
        if single is not None:
            producer.outcome(single)
            _out.print("sent 1 outcome event")
            return
        assert file is not None
        summary = send_outcomes(file, producer.outcome)
    _out.print(f"sent {summary.sent} outcome event(s); rejected lines: {summary.rejected}")
    for rejected in summary.rejected_examples[:20]:
        _err.print(f"  {rejected}", highlight=False)
    if summary.rejected:
        raise typer.Exit(1)


def _flag_event(flags: dict[str, Any]) -> OutcomeEvent:
    try:
        return OutcomeEvent(
            event_id=flags["event_id"] or "",
            trace_id=flags["trace_id"] or "",
            name=flags["name"] or "",
            value=json.loads(flags["value"]),
            observed_at=flags["observed_at"] or datetime.now(UTC),
            session_id=flags["session_id"],
            unit_event_id=flags["unit_event_id"],
        )
    except (ValidationError, ValueError) as exc:
        fields = sorted(
            {str(e["loc"][0]) for e in exc.errors()}
            if isinstance(exc, ValidationError)
            else {"value"}
        )
        _err.print(
            f"invalid outcome event: check --{', --'.join(f.replace('_', '-') for f in fields)}"
        )
        raise typer.Exit(2) from None


@app.command()
def redrive(
    reason: Annotated[
        str | None,
        typer.Option("--reason", envvar="EVALQ_REDRIVE_REASON", help="Only this reason code"),
    ] = None,
) -> None:
    """Re-enqueue open dead letters that decode to a snapshot or outcome now."""
    from worker.ops import producer_for  # noqa: PLC0415 - fast --help
    from worker.ops import redrive as do_redrive  # noqa: PLC0415
    from worker.store import open_store  # noqa: PLC0415

    settings = _settings()
    with open_store(settings.store_url) as store, producer_for(settings, _broker(settings)) as p:
        summary = do_redrive(store, p, reason=reason, batch_size=settings.batch_size)
    _out.print(
        f"dead letters examined: {summary.examined}; re-enqueued: {summary.redriven}; "
        f"still invalid: {summary.still_invalid}"
    )


@app.command()
def report(
    as_json: Annotated[
        bool, typer.Option("--json", envvar="EVALQ_REPORT_JSON", help="Print one JSON object")
    ] = False,
) -> None:
    """Counts of snapshots, evaluations and per-metric statuses/reasons in the store."""
    from worker.ops import report as build_report  # noqa: PLC0415 - fast --help
    from worker.store import open_store  # noqa: PLC0415

    settings = _settings()
    with open_store(settings.store_url) as store:
        data = build_report(store)
    if as_json:
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        return
    _print_report(data)


def _print_report(data: dict[str, Any]) -> None:
    _out.print(f"store: {data['store']}")
    _out.print(f"snapshots: {data['snapshots']}  evaluations: {data['evaluations']}")
    table = Table("metric", "by status", "by reason")
    for metric_id, counts in sorted(data["metrics"].items()):
        table.add_row(metric_id, _pairs(counts["by_status"]), _pairs(counts["by_reason"]))
    _out.print(table)


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counts.items()))


@app.command()
def run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    *,
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", envvar="EVALQ_RUN_TIMEOUT_S", help="Give up after")
    ] = 300.0,
    spawn_worker: Annotated[
        bool,
        typer.Option(
            "--worker/--no-worker",
            envvar="EVALQ_RUN_WORKER",
            help="Start a worker process (off: use running workers)",
        ),
    ] = True,
) -> None:
    """The whole pipeline on this machine: embedded Redis (unless configured), a worker, FILE."""
    from worker.ops import run_pipeline  # noqa: PLC0415 - fast --help

    settings = _settings()
    # SIGTERM unwinds like Ctrl-C, so the embedded Redis and the worker are stopped too.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with _progress() as progress:
        task = progress.add_task("evaluating", total=None)

        def update(done: int, dead: int, total: int) -> None:
            progress.update(task, completed=done + dead, total=total)

        result = run_pipeline(
            file, settings, spawn_worker=spawn_worker, timeout_s=timeout_s, progress=update
        )
    _print_run(result, settings)
    if result.timed_out or result.evaluated == 0:
        raise typer.Exit(1)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_out,
    )


def _print_run(result: Any, settings: Any) -> None:
    if settings.judge.value == "synthetic":
        _out.print(
            "[bold yellow]Judge: SYNTHETIC[/] — deterministic placeholder answers, "
            "not a model's judgment (set EVALQ_JUDGE for a real judge)"
        )
    else:
        _out.print(f"Judge: {settings.judge.value} ({settings.judge_model or 'default model'})")
    pair = settings.effective_thresholds
    note = " (uncalibrated demo values)" if settings.thresholds_are_demo else ""
    _out.print(
        f"Thresholds: fail <= {pair.fail_at_or_below:g}, pass >= {pair.pass_at_or_above:g}{note}"
    )
    _out.print(f"Metric set: {result.metric_set_version}")
    _out.print(_run_table(result))
    _out.print(
        f"snapshots: {result.expected}  evaluated: {result.evaluated}  "
        f"dead letters: {result.dead_lettered}  rejected lines: {result.rejected_lines}"
    )
    _out.print(f"Store: {result.store_location}")
    if result.timed_out:
        _err.print(f"[red]not finished in time[/red]; worker log: {result.worker_log}")


def _run_table(result: Any) -> Table:
    table = Table("metric", "passed", "DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR")
    for metric_id, counts in result.by_metric.items():
        table.add_row(
            metric_id,
            str(result.passed.get(metric_id, 0)),
            *(
                str(counts.get(status, 0))
                for status in ("DECIDED", "INCONCLUSIVE", "SKIPPED", "ERROR")
            ),
        )
    return table


def main() -> None:
    """Console-script entry point (``evalq``)."""
    app()


if __name__ == "__main__":
    main()
