"""``evalq worker``: run a worker (one consumer process per core)."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import invalid_config, require_broker, settings
from ._options import ConcurrencyOpt, ConfigOpt, LanesOpt, setting

__all__ = ["worker"]


def worker(
    *,
    lanes: LanesOpt = None,
    concurrency: ConcurrencyOpt = None,
    processes: Annotated[
        int | None,
        setting("--processes", "EVALQ_PROCESSES", "Consumer processes (default: one per core)"),
    ] = None,
    loglevel: Annotated[str | None, setting("--loglevel", "EVALQ_LOG_LEVEL", "Log level")] = None,
    hostname: Annotated[
        str | None,
        typer.Option("--hostname", envvar="EVALQ_WORKER_HOSTNAME", help="Celery node name"),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Run a worker (one consumer process per core); with no flags it consumes every lane."""
    from worker.running import run_worker  # noqa: PLC0415 - fast --help
    from worker.settings import ConfigError  # noqa: PLC0415

    loaded = settings(
        lanes=lanes, concurrency=concurrency, processes=processes, log_level=loglevel, config=config
    )
    require_broker(loaded)
    try:
        status = run_worker(loaded, hostname=hostname)
    except ConfigError as exc:  # one line, however long (the store's failure line, say)
        invalid_config(exc)
    if status:  # crashed, halted on a store fault (75), or the supervisor gave up (1)
        raise typer.Exit(status)
