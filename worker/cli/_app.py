"""The ``evalq`` Typer app (with ``--version``) and its two consoles (stdout, stderr)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

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
# emoji=False: Rich turns ":x:" into an emoji even with markup off, and trace ids, reasons or
# question texts printed by the commands must come out as they are stored.
out = Console(emoji=False)
err = Console(stderr=True, emoji=False)


def _print_version(wanted: bool) -> None:
    if wanted:
        out.print(f"evalq {version('evalq')}", highlight=False, markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Options of ``evalq`` itself (before the command)."""
