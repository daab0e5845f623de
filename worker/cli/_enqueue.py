"""``evalq enqueue FILE``: read a file into snapshots and put them on a lane."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from producer.snapshot import Lane

from ._app import out
from ._common import (
    SHOWN_REJECTIONS,
    connected,
    invalid,
    print_rejections,
    require_broker,
    say_empty,
    settings,
)
from ._options import FormatOpt, MetricSetOpt, UnitOpt, setting

__all__ = ["EPILOG", "enqueue"]

EPILOG = (
    "FILE may be a FIFO or /dev/stdin (read once, as a stream). Exit status: 0 all sent; "
    "1 rejected lines (the first 20 listed as file:line: field: CODE) or an unreachable "
    "broker; 2 invalid options."
)
"""The ``--help`` epilog: exit statuses."""


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
    metric_set: MetricSetOpt = None,
    batch_size: Annotated[
        int | None,
        setting("--batch-size", "EVALQ_BATCH_SIZE", "Snapshots per backfill message"),
    ] = None,
) -> None:
    """Read FILE into snapshots and enqueue them (backfill lane: batched)."""
    from producer import ImportErrorReport  # noqa: PLC0415 - fast --help
    from worker.producing import snapshots_for  # noqa: PLC0415

    config = settings(metric_set=metric_set, batch_size=batch_size)
    chosen = _lane(lane)
    report = ImportErrorReport(keep=SHOWN_REJECTIONS)
    per_message = config.batch_size if chosen is Lane.BACKFILL else 1
    with connected(config, require_broker(config)) as producer:
        snapshots = snapshots_for(file, config, report=report, format=fmt, unit=unit)
        sent = producer.send_many(snapshots, lane=chosen, batch_size=per_message)
    out.print(f"enqueued {sent} snapshot(s); rejected lines: {report.rejected_count}")
    print_rejections(report.rejected, report.rejected_count)
    if sent == 0 and report.rejected_count == 0:
        say_empty(str(file), "traces", "enqueue")
    if report.rejected_count:
        raise typer.Exit(1)


def _lane(value: str | None) -> Lane | None:
    if value is None:
        return None
    if value not in (Lane.LIVE, Lane.BACKFILL):
        invalid("--lane: expected live or backfill")
    return Lane(value)
