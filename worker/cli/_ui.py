"""``evalq ui``: the read-only result browser over the store (the ``ui`` extra)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ._app import err
from ._common import invalid, settings, store

__all__ = ["EPILOG", "ui"]

EPILOG = (
    "EVALQ_UI_TOKEN (environment only, never a flag) protects every page; it is required "
    "unless --host is a loopback address. Exit status: 2 invalid configuration (a non-loopback "
    "host without EVALQ_UI_TOKEN, an unreachable store, the ui extra missing)."
)
"""The ``--help`` epilog: the token rule and the exit status."""


def ui(
    *,
    host: Annotated[
        str, typer.Option("--host", envvar="EVALQ_UI_HOST", help="Address to listen on")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option("--port", envvar="EVALQ_UI_PORT", min=1, max=65535, help="Port to listen on"),
    ] = 8765,
) -> None:
    """Browse results (overview, per metric, one record) in a web browser; read-only."""
    try:
        from worker.ui import TOKEN_SETTING, Access, UiConfigError, serve  # noqa: PLC0415
    except ImportError:  # the optional extra is not installed
        invalid("evalq ui needs the ui extra: pip install 'evalq[ui]' (UI_EXTRA_MISSING)")
    try:
        access = Access.for_host(host, os.environ.get(TOKEN_SETTING))
    except UiConfigError as exc:
        invalid(str(exc))
    config = settings()
    with store(config, migrate=False, existing=True) as opened:
        err.print(
            f"evalq ui: http://{host}:{port}/ over {opened.location} "
            f"({'open on loopback' if access.open else 'token required'}); Ctrl-C stops",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        serve(opened, access, host, port)
