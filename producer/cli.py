"""``evalq``: the command line. A thin face over ``producer`` and ``worker.ops``.

Every flag has an environment twin: flags that are settings read ``EVALQ_<NAME>`` through
``worker.settings.Settings`` (the flag wins); command-only flags name their variable in ``--help``.
Invalid configuration exits with status 2 and a message naming the variable.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

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
        "--concurrency", help="Evaluations in flight, all processes [env: EVALQ_CONCURRENCY]"
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", dir_okay=False, help="Evaluation configuration (TOML) [env: EVALQ_CONFIG]"
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


@contextmanager
def _store(settings: Any, *, migrate: bool = True) -> Iterator[Any]:
    """The open store; on any store failure one line ``EVALQ_STORE_URL: … (CODE)``, exit 2.

    The store is reached once, without retries, when it opens (``Store.probe``): an unreachable
    one fails within its connect timeout instead of ending in a traceback.
    """
    from worker.store import StoreError, failure_line, open_store  # noqa: PLC0415 - fast --help

    try:
        with open_store(settings.store_url, migrate=migrate) as store:
            yield store
    except StoreError as exc:
        line = failure_line(settings.store_url, exc.code)
        _err.print(line, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


SHOWN_REJECTIONS = 20
"""Rejected lines listed by a command; the rest are counted ("… and N more")."""


def _print_rejections(examples: Any, total: int) -> None:
    """The first :data:`SHOWN_REJECTIONS` rejected lines (file:line: field: CODE), then a count."""
    for rejected in list(examples)[:SHOWN_REJECTIONS]:
        _print_rejection(rejected)
    if total > SHOWN_REJECTIONS:
        _err.print(f"  … and {total - SHOWN_REJECTIONS} more rejected lines", highlight=False)


def _broker_down(exc: BaseException, hint: str | None = None) -> NoReturn:
    """One line (no traceback, no URL: it may hold a password), then exit status 1."""
    hint = f"; {hint}" if hint else ""
    _err.print(
        f"[red]broker unreachable[/red] (EVALQ_BROKER_URL): {type(exc).__name__}{hint}",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(1) from None


@contextmanager
def _connected(settings: Any, url: str, hint: str | None = None) -> Iterator[Any]:
    """A producer whose broker answered one connection attempt; a dead broker is one line."""
    from kombu.exceptions import OperationalError  # noqa: PLC0415 - fast --help

    from worker.ops import producer_for  # noqa: PLC0415

    producer = producer_for(settings, url)
    try:
        try:
            producer.check_broker()
        except (OperationalError, OSError) as exc:
            _broker_down(exc, hint)
        try:
            yield producer
        except OperationalError as exc:  # the broker went away while sending (not a file error)
            _broker_down(exc, hint)
    finally:
        producer.close()


@app.command()
def worker(
    *,
    lanes: LanesOpt = None,
    concurrency: ConcurrencyOpt = None,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes", help="Consumer processes (default: one per core) [env: EVALQ_PROCESSES]"
        ),
    ] = None,
    loglevel: Annotated[
        str | None, typer.Option("--loglevel", help="Log level [env: EVALQ_LOG_LEVEL]")
    ] = None,
    hostname: Annotated[
        str | None,
        typer.Option("--hostname", envvar="EVALQ_WORKER_HOSTNAME", help="Celery node name"),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Run a worker (one consumer process per core); with no flags it consumes every lane."""
    from worker.ops import run_worker  # noqa: PLC0415 - fast --help
    from worker.settings import ConfigError  # noqa: PLC0415

    settings = _settings(
        lanes=lanes, concurrency=concurrency, processes=processes, log_level=loglevel, config=config
    )
    _broker(settings)
    try:
        status = run_worker(settings, hostname=hostname)
    except ConfigError as exc:  # one line, however long (the store's failure line, say)
        _err.print(
            f"[red]invalid configuration:[/red] {exc}", markup=True, highlight=False, soft_wrap=True
        )
        raise typer.Exit(2) from None
    if status:  # crashed, halted on a store fault (75), or the supervisor gave up (1)
        raise typer.Exit(status)


FormatOpt = Annotated[
    str, typer.Option("--format", envvar="EVALQ_FORMAT", help="Trace format (auto-detected)")
]
UnitOpt = Annotated[
    str,
    typer.Option("--unit", envvar="EVALQ_UNIT", help="invocation | session | tool_call"),
]


@app.command(
    epilog=(
        "FILE may be a FIFO or /dev/stdin (read once, as a stream). Exit status: 0 all sent; "
        "1 rejected lines (the first 20 listed as file:line: field: CODE) or an unreachable "
        "broker; 2 invalid options."
    )
)
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
    from worker.ops import snapshots_for  # noqa: PLC0415

    settings = _settings(metric_set=metric_set, batch_size=batch_size)
    chosen = _lane(lane)
    report = ImportErrorReport(keep=SHOWN_REJECTIONS)
    per_message = settings.batch_size if chosen is Lane.BACKFILL else 1
    with _connected(settings, _broker(settings)) as producer:
        snapshots = snapshots_for(file, settings, report=report, format=fmt, unit=unit)
        sent = producer.send_many(snapshots, lane=chosen, batch_size=per_message)
    _out.print(f"enqueued {sent} snapshot(s); rejected lines: {report.rejected_count}")
    _print_rejections(report.rejected, report.rejected_count)
    if report.rejected_count:
        raise typer.Exit(1)


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
    """SIGTERM during a backfill: unwind like Ctrl-C so the resume id is printed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: object) -> None:
    raise _Terminated(signum)


@app.command(
    epilog=(
        "Exit status: 0 done; 1 done with rejected lines or failed snapshots (ERROR results or "
        "dead letters so far), an unreachable broker, or stopped by a send or store failure "
        "(the message names the --resume id); 2 invalid options, inputs or resume id; 130/143 "
        "interrupted by Ctrl-C/SIGTERM (--resume ID continues)."
    )
)
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
    metric_set: Annotated[
        str | None,
        typer.Option("--metric-set", help="agent | agent+trajectory [env: EVALQ_METRIC_SET]"),
    ] = None,
) -> None:
    """Stream PATHS onto the backfill lane: batched, back-pressured, resumable, with progress."""
    from producer._backfill import backfill_id_for, expand_paths  # noqa: PLC0415 - fast --help

    settings = _settings(metric_set=metric_set)
    url = _broker(settings)
    try:
        sources = expand_paths(paths)  # a FIFO or device is refused here, before anything
    except (ValueError, FileNotFoundError) as exc:
        _err.print(f"[red]invalid backfill:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    chosen = resume or backfill_id
    if chosen is None:
        chosen = backfill_id_for(sources, format=fmt, unit=unit, metric_set=settings.metric_set)
    job = _Backfill(paths, chosen, resume, backfill_id, batch_size, max_depth, rate, fmt, unit)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        summary = _run_backfill(job, settings, url)
    except _Terminated as stop:
        _err.print(f"terminated; continue with --resume {chosen}", highlight=False, soft_wrap=True)
        raise typer.Exit(128 + stop.signum) from None
    except KeyboardInterrupt:
        _err.print(f"interrupted; continue with --resume {chosen}", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    _print_backfill(summary, chosen)


def _run_backfill(job: _Backfill, settings: Any, url: str) -> Any:
    """One backfill run with the store, the producer and the progress bar open."""
    import redis  # noqa: PLC0415

    from producer._backfill import (  # noqa: PLC0415 - fast --help
        BackfillError,
        RedisQueueDepth,
        rich_progress,
        run_backfill,
        store_counts,
    )
    from worker.broker import is_redis  # noqa: PLC0415
    from worker.store import StoreError, open_store  # noqa: PLC0415

    depth = RedisQueueDepth(url, LANE_QUEUES[Lane.BACKFILL]) if is_redis(url) else None
    per_message = settings.batch_size
    if job.resume:
        hint = f"continue with --resume {job.chosen}"
    else:
        hint = f"nothing sent for backfill {job.chosen}: run the same command again"
    try:
        with (
            open_store(settings.store_url) as store,
            _connected(settings, url, hint) as producer,
            rich_progress(_out) as progress,
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
                metric_set=settings.metric_set,
            )
    except (BackfillError, StoreError) as exc:
        _err.print(
            f"[red]backfill stopped:[/red] {exc.code}; continue with --resume {job.chosen}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    except ValueError as exc:  # BACKFILL_MISMATCH, UNKNOWN_BACKFILL, INPUT_CHANGED, --format
        _err.print(f"[red]invalid backfill:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except redis.RedisError as exc:  # the queue depth could not be read, even after retries
        _broker_down(exc, f"continue with --resume {job.chosen}")
    finally:
        if depth is not None:
            depth.close()


def _print_backfill(summary: Any, chosen: str) -> None:
    p = summary.progress
    evaluated = "?" if p.evaluated is None else p.evaluated
    failed = "?" if p.failed is None else p.failed
    _out.print(
        f"backfill {p.backfill_id}: read {p.read}, enqueued {p.enqueued}, "
        f"already sent {p.skipped}, sampled out {p.sampled_out}, rejected lines {p.rejected}, "
        f"not ready {p.not_ready}; evaluated so far {evaluated}, failed {failed}",
        highlight=False,
        soft_wrap=True,
    )
    _print_rejections(summary.rejected_examples, p.rejected)
    if summary.stopped:
        _err.print(
            f"stopped early; continue with --resume {chosen}", highlight=False, soft_wrap=True
        )
    if p.failed:
        _err.print(
            f"{p.failed} snapshot(s) of this backfill failed (ERROR results or dead letters): "
            "see `evalq status` and `evalq redrive`",
            highlight=False,
            soft_wrap=True,
        )
    if p.rejected or p.failed:
        raise typer.Exit(1)


def _lane(value: str | None) -> Lane | None:
    if value is None:
        return None
    if value not in (Lane.LIVE, Lane.BACKFILL):
        _err.print("--lane: expected live or backfill")
        raise typer.Exit(2)
    return Lane(value)


_EVENT_FLAGS = ("event_id", "trace_id", "name", "observed_at", "session_id", "unit_event_id")


@app.command(
    epilog=(
        "A bad line is reported as file:line: field: CODE and the rest is still sent. "
        "Exit status: 1 when any line was rejected, 2 for invalid flags."
    )
)
def outcome(
    file: Annotated[
        Path | None,
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            envvar="EVALQ_OUTCOME_FILE",
            help="JSONL of outcome events (else one event from the flags)",
        ),
    ] = None,
    *,
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
    """Send outcome events on the outcomes lane: every line of FILE, or one from the flags."""
    from producer._backfill import send_outcomes  # noqa: PLC0415 - fast --help

    flags = locals()
    if file is not None and any(flags[f] is not None for f in _EVENT_FLAGS):
        _err.print("give FILE or the event flags (--event-id …), not both")
        raise typer.Exit(2)
    settings = _settings()
    single = None if file else _flag_event(flags)
    with _connected(settings, _broker(settings)) as producer:
        if single is not None:
            producer.outcome(single)
            _out.print("sent 1 outcome event")
            return
        assert file is not None
        summary = send_outcomes(file, producer.outcome, keep=SHOWN_REJECTIONS)
    _out.print(f"sent {summary.sent} outcome event(s); rejected lines: {summary.rejected}")
    _print_rejections(summary.rejected_examples, summary.rejected)
    if summary.rejected:
        raise typer.Exit(1)


def _print_rejection(rejected: object) -> None:
    _err.print(f"  {rejected}", highlight=False, markup=False, soft_wrap=True)


def _flag_event(flags: dict[str, Any]) -> OutcomeEvent:
    from producer._backfill import outcome_problem  # noqa: PLC0415 - fast --help

    event = _parse_flag_event(flags)
    problem = outcome_problem(event)
    if problem is not None:
        _err.print(f"invalid outcome event: --value: {problem[0]}: {problem[1]}", highlight=False)
        raise typer.Exit(2)
    return event


def _parse_flag_event(flags: dict[str, Any]) -> OutcomeEvent:
    try:
        return OutcomeEvent(
            event_id=flags["event_id"] or "",
            trace_id=flags["trace_id"] or "",
            name=flags["name"] or "",
            value=json.loads(flags["value"], parse_constant=_no_constant),
            observed_at=flags["observed_at"] or datetime.now(UTC),
            session_id=flags["session_id"],
            unit_event_id=flags["unit_event_id"],
        )
    except (ValidationError, ValueError, RecursionError) as exc:
        fields = sorted(
            {str(e["loc"][0]) for e in exc.errors()}
            if isinstance(exc, ValidationError)
            else {"value"}
        )
        _err.print(
            f"invalid outcome event: check --{', --'.join(f.replace('_', '-') for f in fields)}"
        )
        raise typer.Exit(2) from None


def _no_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")


@app.command()
def redrive(
    reason: Annotated[
        str | None,
        typer.Option("--reason", envvar="EVALQ_REDRIVE_REASON", help="Only this reason code"),
    ] = None,
) -> None:
    """Re-enqueue open dead letters that decode to a snapshot or outcome now."""
    from worker.ops import redrive as do_redrive  # noqa: PLC0415 - fast --help

    settings = _settings()
    with _store(settings) as store, _connected(settings, _broker(settings)) as p:
        summary = do_redrive(store, p, reason=reason, batch_size=settings.batch_size)
    _out.print(
        f"dead letters examined: {summary.examined}; re-enqueued: {summary.redriven}; "
        f"still invalid: {summary.still_invalid}"
    )
    for skip in summary.skipped:  # why each stays open (reason codes, never payload content)
        _err.print(f"  {skip}", highlight=False, markup=False, soft_wrap=True)
    if summary.still_invalid > len(summary.skipped):
        more = summary.still_invalid - len(summary.skipped)
        _err.print(f"  … and {more} more still invalid", highlight=False)


@app.command()
def report(
    *,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="EVALQ_REPORT_JSON", help="Print one JSON object")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", envvar="EVALQ_REPORT_HTML", dir_okay=False, help="Write a static HTML page"
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            envvar="EVALQ_REPORT_SINCE",
            help="Evaluations created at/after: ISO time or a duration ago (30m, 6h, 7d)",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", envvar="EVALQ_REPORT_UNTIL", help="Created before (same forms)"),
    ] = None,
    backfill_id: Annotated[
        str | None,
        typer.Option("--backfill", envvar="EVALQ_REPORT_BACKFILL", help="Only this backfill id"),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", envvar="EVALQ_REPORT_METRICS", help="Comma list of metric ids"),
    ] = None,
    metric_set: Annotated[
        str | None,
        typer.Option(
            "--metric-set", envvar="EVALQ_REPORT_METRIC_SET", help="Only this metric set (name)"
        ),
    ] = None,
    metric_set_version: Annotated[
        str | None,
        typer.Option(
            "--metric-set-version", envvar="EVALQ_REPORT_METRIC_SET_VERSION", help="Only this one"
        ),
    ] = None,
    agent_version: Annotated[
        str | None,
        typer.Option("--agent-version", envvar="EVALQ_REPORT_AGENT_VERSION", help="Slice filter"),
    ] = None,
    tool: Annotated[
        str | None, typer.Option("--tool", envvar="EVALQ_REPORT_TOOL", help="Slice filter")
    ] = None,
    environment: Annotated[
        str | None,
        typer.Option("--environment", envvar="EVALQ_REPORT_ENVIRONMENT", help="Slice filter"),
    ] = None,
    scenario_by: Annotated[
        str,
        typer.Option(
            "--scenario-by",
            envvar="EVALQ_REPORT_SCENARIO_BY",
            help="Gold-label scenario: tool | agent_version | environment | source",
        ),
    ] = "tool",
    slice_by: Annotated[
        str,
        typer.Option(
            "--slice-by",
            envvar="EVALQ_REPORT_SLICE_BY",
            help="Coverage slices: agent_version | tool | environment",
        ),
    ] = "agent_version",
) -> None:
    """Per-metric rates with coverage and 95% intervals, gold labels, latency, usage, outcomes."""
    from worker.reporting import build_report, render_html, render_terminal  # noqa: PLC0415

    settings = _settings()
    scope = _report_scope(locals())
    with _store(settings) as store:
        result = build_report(store, scope)
    if html is not None:
        try:
            html.write_text(render_html(result), encoding="utf-8")
        except OSError as exc:
            _err.print(f"cannot write --html {html} ({type(exc).__name__})", markup=False)
            raise typer.Exit(2) from None
        _err.print(f"HTML report written to {html}", highlight=False, markup=False)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
    elif html is None:
        _out.print(render_terminal(result))
    if result.synthetic and (as_json or html is not None):
        _err.print("[bold yellow]SYNTHETIC judge[/]: placeholder answers, not a model's judgment")


def _report_scope(flags: dict[str, Any]) -> Any:
    from worker.reporting import ReportScope, parse_when  # noqa: PLC0415 - fast --help

    now = datetime.now(UTC)
    times: dict[str, datetime | None] = {}
    for name in ("since", "until"):
        try:
            times[name] = parse_when(flags[name], now) if flags[name] else None
        except ValueError:
            _err.print(f"--{name}: expected an ISO date/time or a duration such as 30m, 6h, 7d")
            raise typer.Exit(2) from None
    metric_ids = tuple(m.strip() for m in (flags["metrics"] or "").split(",") if m.strip())
    fields = (
        "backfill_id",
        "metric_set",
        "metric_set_version",
        "agent_version",
        "tool",
        "environment",
    )
    try:
        return ReportScope(
            **times,
            **{name: flags[name] for name in fields},
            metric_ids=metric_ids,
            scenario_by=flags["scenario_by"],
            slice_by=flags["slice_by"],
        )
    except ValidationError as exc:
        names = sorted({str(e["loc"][0]).replace("_", "-") for e in exc.errors()})
        _err.print(f"invalid report option: check --{', --'.join(names)}")
        raise typer.Exit(2) from None


@app.command()
def status(
    *,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="EVALQ_STATUS_JSON", help="Print one JSON object")
    ] = False,
    window_s: Annotated[
        float,
        typer.Option(
            "--window-s",
            envvar="EVALQ_STATUS_WINDOW_S",
            min=0,
            max=100 * 365 * 86400,  # a century; beyond it the window cannot be a datetime
            help="Decision counts over the last S seconds (0: all time)",
        ),
    ] = 3600.0,
    stale_after_s: Annotated[
        float,
        typer.Option(
            "--stale-after-s",
            envvar="EVALQ_STATUS_STALE_AFTER_S",
            min=0,
            help="A backfill with no checkpoint for this long is 'stalled'",
        ),
    ] = 300.0,
    inspect_timeout_s: Annotated[
        float,
        typer.Option(
            "--inspect-timeout-s",
            envvar="EVALQ_STATUS_INSPECT_TIMEOUT_S",
            min=0.1,
            help="Wait this long for workers to answer inspect ping/active",
        ),
    ] = 1.0,
    max_depth: Annotated[
        int | None,
        typer.Option(
            "--max-depth", envvar="EVALQ_STATUS_MAX_DEPTH", help="Breach: any lane deeper"
        ),
    ] = None,
    max_oldest_age_s: Annotated[
        float | None,
        typer.Option(
            "--max-oldest-age-s",
            envvar="EVALQ_STATUS_MAX_OLDEST_AGE_S",
            help="Breach: a lane's oldest waiting message older than S seconds",
        ),
    ] = None,
    max_dead_letters: Annotated[
        int | None,
        typer.Option(
            "--max-dead-letters",
            envvar="EVALQ_STATUS_MAX_DEAD_LETTERS",
            help="Breach: more open dead letters",
        ),
    ] = None,
    min_workers: Annotated[
        int | None,
        typer.Option(
            "--min-workers", envvar="EVALQ_STATUS_MIN_WORKERS", help="Breach: fewer workers online"
        ),
    ] = None,
    min_recent: Annotated[
        int | None,
        typer.Option(
            "--min-recent-5m",
            envvar="EVALQ_STATUS_MIN_RECENT_5M",
            help="Breach: fewer evaluations recorded in the last 5 minutes",
        ),
    ] = None,
) -> None:
    """Queues, workers, throughput, dead letters, backfills and why traces were not scored.

    Exits 3 (listing them) when a threshold given here is breached: usable as a cron check.
    """
    from worker.reporting import (  # noqa: PLC0415 - fast --help
        BREACH_EXIT_CODE,
        StatusThresholds,
        collect_status,
        render_status,
    )

    settings = _settings()
    thresholds = StatusThresholds(
        max_depth=max_depth,
        max_oldest_age_s=max_oldest_age_s,
        max_dead_letters=max_dead_letters,
        min_workers=min_workers,
        min_recent_5m=min_recent,
    )
    with _store(settings) as store:
        found = collect_status(
            store,
            settings,
            settings.broker_url,
            window_s=window_s,
            stale_after_s=stale_after_s,
            inspect_timeout_s=inspect_timeout_s,
        )
    found = found.model_copy(update={"breaches": thresholds.breaches(found)})
    if as_json:
        sys.stdout.write(json.dumps(found.to_json(), sort_keys=True) + "\n")
    else:
        _out.print(render_status(found))
    for breach in found.breaches:
        _err.print(f"threshold breached: {breach}", highlight=False, markup=False)
    if found.breaches:
        raise typer.Exit(BREACH_EXIT_CODE)


@app.command(
    epilog=(
        "Exit status: 0 finished (each snapshot evaluated or dead-lettered), no line rejected; "
        "1 rejected lines (the first 20 listed), nothing evaluated, or not done in --timeout-s."
    )
)
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
    config: ConfigOpt = None,
) -> None:
    """The whole pipeline on this machine: embedded Redis (unless configured), a worker, FILE."""
    from worker.ops import run_pipeline  # noqa: PLC0415 - fast --help

    settings = _settings(config=config)
    with _store(settings):  # fail fast, in one line, before starting Redis and a worker
        pass
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
    _print_rejections(result.rejected_examples, result.rejected_lines)
    if result.timed_out or result.evaluated == 0 or result.rejected_lines:
        raise typer.Exit(1)


store_app = typer.Typer(
    help="Store maintenance, run as the role that owns the tables.", no_args_is_help=True
)
app.add_typer(store_app, name="store")


@store_app.command("migrate")
def store_migrate() -> None:
    """Create or upgrade the schema. Run it as the tables' owner; workers then need only
    INSERT and SELECT (they skip migrating a current schema)."""
    from worker.store import SCHEMA_VERSION  # noqa: PLC0415 - fast --help

    settings = _settings()
    with _store(settings, migrate=False) as store:
        created = store.migrate()
        where = store.location
    state = "created" if created else "already current"
    line = f"schema version {SCHEMA_VERSION} {state}: {where}"
    _out.print(line, highlight=False, markup=False, soft_wrap=True)


config_app = typer.Typer(help="The evaluation configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command(
    "check", epilog="Exit status: 0 valid (the effective configuration printed); 2 invalid."
)
def config_check(
    file: Annotated[
        Path | None, typer.Argument(dir_okay=False, help="TOML file (default: EVALQ_CONFIG)")
    ] = None,
) -> None:
    """Validate FILE and the environment; print the effective configuration (secrets masked)."""
    from worker.config_check import check_configuration  # noqa: PLC0415 - fast --help

    text, status = check_configuration(file)
    (_out if status == 0 else _err).print(text, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(status)


@app.command()
def purge(
    content_before: Annotated[
        str,
        typer.Option(
            "--content-before",
            envvar="EVALQ_PURGE_CONTENT_BEFORE",
            help="Expire content recorded before: ISO date/time or a duration ago (90d)",
        ),
    ],
) -> None:
    """Expire snapshot contents and dead-letter payloads older than a date; every record
    (snapshot metadata, evaluations, results, dead-letter size and sha256) stays readable.
    Run it as the tables' owner role."""
    from worker.reporting import parse_when  # noqa: PLC0415 - fast --help

    try:
        before = parse_when(content_before, datetime.now(UTC))
    except ValueError:
        _err.print("--content-before: expected an ISO date/time or a duration such as 90d")
        raise typer.Exit(2) from None
    settings = _settings()
    with _store(settings) as store:
        try:
            summary = store.purge_content(before)
        except ValueError as exc:  # a horizon in the future
            _err.print(f"--content-before: {exc}", markup=False, highlight=False)
            raise typer.Exit(2) from None
    _out.print(
        f"expired {summary.contents_removed} snapshot content(s) and "
        f"{summary.payloads_cleared} dead-letter payload(s) recorded before "
        f"{summary.content_before.isoformat()}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


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
