"""``evalq redrive``: re-enqueue the open dead letters a worker would accept now."""

from __future__ import annotations

from typing import Annotated

import typer

from ._app import err, out
from ._common import connected, invalid, require_broker, settings, store

__all__ = ["redrive"]


def redrive(
    reason: Annotated[
        str | None,
        typer.Option("--reason", envvar="EVALQ_REDRIVE_REASON", help="Only this reason code"),
    ] = None,
) -> None:
    """Re-enqueue open dead letters that decode to a snapshot or outcome now."""
    from worker.dead_letters import DeadLetterCode  # noqa: PLC0415 - fast --help
    from worker.dead_letters import redrive as redrive_open  # noqa: PLC0415

    if reason is not None and reason not in tuple(DeadLetterCode):
        known = ", ".join(DeadLetterCode)
        invalid(f"--reason: unknown reason code {reason}; known: {known}")
    config = settings()
    with store(config) as opened, connected(config, require_broker(config)) as producer:
        summary = redrive_open(opened, producer, reason=reason, batch_size=config.batch_size)
    out.print(
        f"dead letters examined: {summary.examined}; re-enqueued: {summary.redriven}; "
        f"still invalid: {summary.still_invalid}"
    )
    for skip in summary.skipped:  # why each stays open (reason codes, never payload content)
        err.print(f"  {skip}", highlight=False, markup=False, soft_wrap=True)
    if summary.still_invalid > len(summary.skipped):
        more = summary.still_invalid - len(summary.skipped)
        err.print(f"  … and {more} more still invalid", highlight=False)
