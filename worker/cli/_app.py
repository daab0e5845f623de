"""The ``evalq`` Typer app and its two consoles (results on stdout, messages on stderr)."""

from __future__ import annotations

import typer
from rich.console import Console

__all__ = ["app", "err", "out"]

app = typer.Typer(
    name="evalq",
    help="Evaluate what AI agents already did: snapshots on a queue, JEV metrics, records.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)
