"""Options more than one command takes, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["ConcurrencyOpt", "ConfigOpt", "FormatOpt", "LanesOpt", "MetricSetOpt", "UnitOpt"]

LanesOpt = Annotated[
    str | None,
    typer.Option("--lanes", help="Comma list of live,backfill,outcomes [env: EVALQ_LANES]"),
]
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        "--concurrency", help="Evaluations in flight, all processes [env: EVALQ_CONCURRENCY]"
    ),
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
MetricSetOpt = Annotated[
    str | None,
    typer.Option("--metric-set", help="agent | agent+trajectory [env: EVALQ_METRIC_SET]"),
]
