"""``evalq status``: queues, workers, throughput, dead letters, backfills; a cron check."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ._app import err, out
from ._common import settings, store
from ._options import in_range

__all__ = ["status"]

_CENTURY_S = 100 * 365 * 86400
"""The longest ``--window-s``: beyond it the window's start cannot be a datetime."""


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
            callback=in_range(0, _CENTURY_S),
            help="Decision counts over the last S seconds (0: all time)",
        ),
    ] = 3600.0,
    stale_after_s: Annotated[
        float,
        typer.Option(
            "--stale-after-s",
            envvar="EVALQ_STATUS_STALE_AFTER_S",
            callback=in_range(0),
            help="A backfill with no checkpoint for this long is 'stalled'",
        ),
    ] = 300.0,
    inspect_timeout_s: Annotated[
        float,
        typer.Option(
            "--inspect-timeout-s",
            envvar="EVALQ_STATUS_INSPECT_TIMEOUT_S",
            callback=in_range(0.1),
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

    config = settings()
    thresholds = StatusThresholds(
        max_depth=max_depth,
        max_oldest_age_s=max_oldest_age_s,
        max_dead_letters=max_dead_letters,
        min_workers=min_workers,
        min_recent_5m=min_recent,
    )
    with store(config, existing=True) as opened:
        found = collect_status(
            opened,
            config,
            config.broker_url,
            window_s=window_s,
            stale_after_s=stale_after_s,
            inspect_timeout_s=inspect_timeout_s,
        )
    found = found.model_copy(update={"breaches": thresholds.breaches(found)})
    if as_json:
        sys.stdout.write(json.dumps(found.to_json(), sort_keys=True) + "\n")
    else:
        out.print(render_status(found))
    for breach in found.breaches:
        err.print(f"threshold breached: {breach}", highlight=False, markup=False)
    if found.breaches:
        raise typer.Exit(BREACH_EXIT_CODE)
