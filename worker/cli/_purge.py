"""``evalq purge --content-before``: expire evaluated content; every record stays readable."""

from __future__ import annotations

from typing import Annotated

import typer

from ._app import out
from ._common import invalid, settings, store
from ._when import when

__all__ = ["purge"]


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
    """Expire snapshot contents and dead-letter payloads older than a date, and the question
    texts only such snapshots asked; every record (snapshot metadata, evaluations, results and
    their digests, dead-letter size and sha256) stays readable. Run it as the tables' owner."""
    before = when("content-before", content_before, "90d")
    config = settings()
    with store(config) as opened:
        try:
            summary = opened.purge_content(before)
        except ValueError as exc:  # a horizon in the future
            invalid(f"--content-before: {exc}")
    out.print(
        f"expired {summary.contents_removed} snapshot content(s), "
        f"{summary.payloads_cleared} dead-letter payload(s) and "
        f"{summary.question_texts_removed} question text(s) recorded before "
        f"{summary.content_before.isoformat()}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
