"""``evalq retry``: re-evaluate the snapshots whose newest attempt failed (a judge outage).

A new evaluation per snapshot, linked to the one it supersedes (never a change to it): the next
attempt of the same metric-set version, enqueued on the backfill lane from the stored content.
The work is :func:`worker.retrying.retry_failed`'s; this is its face.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ._app import err, out
from ._common import connected, invalid, require_broker, settings, store
from ._when import when

if TYPE_CHECKING:
    from worker.retrying import RetrySummary

__all__ = ["EPILOG", "retry"]

EPILOG = (
    "Retries go to the backfill lane: a worker serving it (evalq worker --lanes backfill, or the "
    "default lanes) records each as a new attempt linked to the failed one. Exit status: 0 (also "
    "when nothing needed a retry); 2 invalid options or store; 1 broker unreachable."
)


def retry(
    *,
    reason: Annotated[
        list[str] | None,
        typer.Option(
            "--reason",
            metavar="CODE",
            # A setting (Settings reads the variable; the flag wins), so Typer must not read it.
            help="Retry newest attempts with a result of this reason code (repeatable; default "
            "BACKEND_ERROR and TIMEOUT, or \\[retry] reasons)\n\n\\[env var: EVALQ_RETRY_REASONS]",
        ),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric", envvar="EVALQ_RETRY_METRIC", help="Only results of this metric id"
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            envvar="EVALQ_RETRY_SINCE",
            help="Newest attempts recorded at/after: ISO time or a duration ago (30m, 6h, 7d)",
        ),
    ] = None,
    backfill: Annotated[
        str | None,
        typer.Option("--backfill", envvar="EVALQ_RETRY_BACKFILL", help="Only this backfill's"),
    ] = None,
) -> None:
    """Re-enqueue snapshots whose newest evaluation failed, as their next attempt."""
    from worker.retrying import RetryChoice, retry_failed  # noqa: PLC0415 - fast --help
    from worker.store import RecordScope  # noqa: PLC0415

    _check_metric(metric)
    config = settings(retry_reasons=",".join(reason) if reason else None)
    scope = RecordScope(
        since=when("since", since, "6h") if since else None,
        backfill_id=backfill,
    )
    choice = RetryChoice(config.retry_reasons, metric_id=metric, scope=scope)
    with (
        store(config, existing=True) as opened,
        connected(config, require_broker(config)) as producer,
    ):
        summary = retry_failed(opened, producer, choice, batch_size=config.batch_size)
    _print(summary, choice.reasons)


def _check_metric(metric: str | None) -> None:
    from worker.metric_sets import reported_metric_ids  # noqa: PLC0415 - fast --help

    known = reported_metric_ids()
    if metric is not None and metric not in known:
        invalid(f"--metric: unknown metric id {metric}; known: {', '.join(known)}")


def _print(summary: RetrySummary, reasons: tuple[str, ...]) -> None:
    codes = " or ".join(reasons)
    if summary.examined == 0:
        out.print(
            f"nothing to retry: no newest evaluation has a result with {codes}", soft_wrap=True
        )
        return
    out.print(
        f"newest evaluations with {codes}: {summary.examined}; re-enqueued as their next "
        f"attempt: {summary.enqueued} (backfill lane); not retryable: {summary.skipped}",
        highlight=False,
        soft_wrap=True,
    )
    for skip in summary.examples:  # ids and a code, never content
        err.print(f"  {skip}", highlight=False, markup=False, soft_wrap=True)
    if summary.skipped > len(summary.examples):
        err.print(f"  … and {summary.skipped - len(summary.examples)} more", highlight=False)
