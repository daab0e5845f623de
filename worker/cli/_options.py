"""Options more than one command takes, declared once, and how a setting's flag is declared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from typer.models import OptionInfo

__all__ = [
    "ConcurrencyOpt",
    "ConfigOpt",
    "FormatOpt",
    "LanesOpt",
    "MetricSetOpt",
    "UnitOpt",
    "in_range",
    "setting",
]


def setting(flag: str, variable: str, text: str) -> OptionInfo:
    """A flag that is a setting: ``Settings`` reads ``variable`` (the flag wins when given).

    Typer must not read the variable itself (the settings name it in their errors), so its
    ``[env var: …]`` line is written into the help, escaped: Rich markup would swallow it.
    """
    option: OptionInfo = typer.Option(flag, help=f"{text}\n\n\\[env var: {variable}]")
    return option


def in_range(low: float, high: float | None = None) -> Callable[[float], float]:
    """A check of ``low <= value (<= high)`` in Typer's words (NaN fails it).

    Used instead of ``min=``/``max=``, whose range Typer prints in the type column: that column
    then squeezes the help column until names are cut at 80 columns.
    """

    def check(value: float) -> float:
        if high is not None and not value <= high:
            raise typer.BadParameter(f"Input should be less than or equal to {high:.15g}")
        if not value >= low:
            raise typer.BadParameter(f"Input should be greater than or equal to {low:.15g}")
        return value

    return check


LanesOpt = Annotated[
    str | None, setting("--lanes", "EVALQ_LANES", "Comma list of live,backfill,outcomes")
]
ConcurrencyOpt = Annotated[
    int | None,
    setting("--concurrency", "EVALQ_CONCURRENCY", "Evaluations in flight, all processes"),
]
FormatOpt = Annotated[
    str, typer.Option("--format", envvar="EVALQ_FORMAT", help="Trace format (auto-detected)")
]
UnitOpt = Annotated[
    str,
    typer.Option("--unit", envvar="EVALQ_UNIT", help="invocation | session | tool_call"),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        dir_okay=False,
        help="Evaluation configuration (TOML)\n\n\\[env var: EVALQ_CONFIG]",
    ),
]
"""``--config FILE`` (a setting: ``EVALQ_CONFIG``; Typer's ``dir_okay`` needs a plain option)."""
MetricSetOpt = Annotated[
    str | None, setting("--metric-set", "EVALQ_METRIC_SET", "agent | agent+trajectory")
]
