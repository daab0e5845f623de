"""``evalq config check [FILE]``: validate the evaluation configuration and the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._app import err, out

__all__ = ["CHECK_EPILOG", "config_app"]

CHECK_EPILOG = "Exit status: 0 valid (the effective configuration printed); 2 invalid."
"""The ``--help`` epilog of ``config check``."""

config_app = typer.Typer(help="The evaluation configuration.", no_args_is_help=True)


def config_check(
    file: Annotated[
        Path | None, typer.Argument(dir_okay=False, help="TOML file (default: EVALQ_CONFIG)")
    ] = None,
) -> None:
    """Validate FILE and the environment; print the effective configuration (secrets masked)."""
    from worker.config_check import check_configuration  # noqa: PLC0415 - fast --help

    text, status = check_configuration(file)
    (out if status == 0 else err).print(text, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(status)


config_app.command("check", epilog=CHECK_EPILOG)(config_check)
