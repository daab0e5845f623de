"""``evalq queue-exporter``: serve the queue gauges (depth, unacked, oldest age) for Prometheus."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import require_broker, settings

__all__ = ["queue_exporter"]


def queue_exporter(
    *,
    addr: Annotated[
        str,
        typer.Option("--addr", envvar="EVALQ_QUEUE_EXPORTER_ADDR", help="Address to listen on"),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", envvar="EVALQ_QUEUE_EXPORTER_PORT", help="Port of /metrics")
    ] = 9809,
    keyprefix: Annotated[
        str,
        typer.Option(
            "--keyprefix",
            envvar="EVALQ_QUEUE_EXPORTER_KEYPREFIX",
            help="kombu global_keyprefix, if any",
        ),
    ] = "",
) -> None:
    """Serve evalq_queue_* gauges read from the Redis broker (one per deployment, not per worker).

    Exits 0 on SIGTERM/SIGINT."""
    from worker.metrics import serve_queue_exporter  # noqa: PLC0415 - fast --help

    url = require_broker(settings())
    raise typer.Exit(serve_queue_exporter(url, addr=addr, port=port, keyprefix=keyprefix))
