"""``evalq ui``: the read-only result browser over the store (the ``ui`` extra)."""

from __future__ import annotations

from typing import Annotated

import typer

from ._app import err
from ._common import invalid, settings, store

__all__ = ["EPILOG", "ui"]

EPILOG = (
    "EVALQ_UI_TOKEN (a setting: environment only, never a flag) protects every page; it is "
    "required unless --host is a loopback address. Exit status: 2 invalid configuration "
    "(a non-loopback host without EVALQ_UI_TOKEN, an unreachable store, the ui extra missing)."
)
"""The ``--help`` epilog: the token rule and the exit status."""
_EXTRA = frozenset({"starlette", "jinja2", "uvicorn"})
"""The ``ui`` extra's modules: missing one means the extra is not installed."""


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
        from worker.ui import Access, UiConfigError, serve  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        if exc.name not in _EXTRA:
            raise
        invalid("evalq ui needs the ui extra: pip install 'evalq[ui]' (UI_EXTRA_MISSING)")
    config = settings()
    token = config.ui_token.get_secret_value() if config.ui_token is not None else None
    try:
        access = Access.for_host(host, token)
    except UiConfigError as exc:
        invalid(str(exc))
    with store(config, migrate=False, existing=True) as opened:
        err.print(
            f"evalq ui: http://{host}:{port}/ over {opened.location} "
            f"({'open on loopback' if access.open else 'token required'}); Ctrl-C stops",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        serve(opened, access, host, port)
