"""``evalq store …``: store maintenance, run as the role that owns the tables."""

from __future__ import annotations

import typer

from ._app import out
from ._common import settings, store

__all__ = ["store_app"]

store_app = typer.Typer(
    help="Store maintenance, run as the role that owns the tables.", no_args_is_help=True
)


@store_app.command("migrate")
def store_migrate() -> None:
    """Create or upgrade the schema. Run it as the tables' owner; workers then need only
    INSERT and SELECT (they skip migrating a current schema)."""
    from worker.store import SCHEMA_VERSION  # noqa: PLC0415 - fast --help

    config = settings()
    with store(config, migrate=False) as opened:
        created = opened.migrate()
        where = opened.location
    state = "created" if created else "already current"
    line = f"schema version {SCHEMA_VERSION} {state}: {where}"
    out.print(line, highlight=False, markup=False, soft_wrap=True)
