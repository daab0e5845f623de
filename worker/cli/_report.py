"""``evalq report``: per-metric rates with coverage and intervals, as a table, JSON or HTML."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from ._app import err, out
from ._common import invalid, settings, store
from ._gates import FailUnderOpt, MinCoverageOpt, enforce, parse_gates
from ._when import when

if TYPE_CHECKING:
    from worker.reporting import EvalReport, ReportScope

__all__ = ["report"]

_LANES = ("live", "backfill")
"""The lanes that carry snapshots (``producer.snapshot.Lane``; outcomes carry none)."""


def _slice(flag: str, env: str) -> object:
    return typer.Option(flag, envvar=env, help="Slice filter")


@dataclass(frozen=True)
class _ScopeFlags:
    """The flags that narrow a report, as given."""

    since: str | None
    until: str | None
    backfill_id: str | None
    lane: str | None
    metrics: str | None
    metric_set: str | None
    metric_set_version: str | None
    agent_version: str | None
    tool: str | None
    environment: str | None
    scenario_by: str
    slice_by: str
    pool_versions: bool


def report(
    *,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="EVALQ_REPORT_JSON", help="Print one JSON object")
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", envvar="EVALQ_REPORT_HTML", dir_okay=False, help="Write a static HTML page"
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            envvar="EVALQ_REPORT_SINCE",
            help="Evaluations created at/after: ISO time or a duration ago (30m, 6h, 7d)",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", envvar="EVALQ_REPORT_UNTIL", help="Created before (same forms)"),
    ] = None,
    backfill_id: Annotated[
        str | None,
        typer.Option(
            "--backfill",
            envvar="EVALQ_REPORT_BACKFILL",
            help="Only units this backfill id sent (also those sent live before)",
        ),
    ] = None,
    lane: Annotated[
        str | None,
        typer.Option(
            "--lane",
            envvar="EVALQ_REPORT_LANE",
            help="Only units sent on this lane: live | backfill",
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", envvar="EVALQ_REPORT_METRICS", help="Comma list of metric ids"),
    ] = None,
    metric_set: Annotated[
        str | None,
        typer.Option(
            "--metric-set", envvar="EVALQ_REPORT_METRIC_SET", help="Only this metric set (name)"
        ),
    ] = None,
    metric_set_version: Annotated[
        str | None,
        typer.Option(
            "--metric-set-version", envvar="EVALQ_REPORT_METRIC_SET_VERSION", help="Only this one"
        ),
    ] = None,
    agent_version: Annotated[
        str | None, _slice("--agent-version", "EVALQ_REPORT_AGENT_VERSION")
    ] = None,
    tool: Annotated[str | None, _slice("--tool", "EVALQ_REPORT_TOOL")] = None,
    environment: Annotated[str | None, _slice("--environment", "EVALQ_REPORT_ENVIRONMENT")] = None,
    scenario_by: Annotated[
        str,
        typer.Option(
            "--scenario-by",
            envvar="EVALQ_REPORT_SCENARIO_BY",
            help="Gold-label scenario: tool | agent_version | environment | source",
        ),
    ] = "tool",
    slice_by: Annotated[
        str,
        typer.Option(
            "--slice-by",
            envvar="EVALQ_REPORT_SLICE_BY",
            help="Coverage slices: agent_version | tool | environment",
        ),
    ] = "agent_version",
    pool_versions: Annotated[
        bool,
        typer.Option(
            "--pool-versions",
            envvar="EVALQ_REPORT_POOL_VERSIONS",
            help="Pool metric-set versions into one set of numbers (default: side by side)",
        ),
    ] = False,
    fail_under: FailUnderOpt = None,
    min_coverage: MinCoverageOpt = 0.5,
) -> None:
    """Per-metric rates with coverage and 95% intervals, gold labels, latency, usage, outcomes.

    Each unit counts once per metric-set version (its newest evaluation); versions are shown
    side by side unless --pool-versions. With --fail-under (a CI gate) it exits 3 when a gate
    fails, printing one line per gate.
    """
    from worker.reporting import build_report  # noqa: PLC0415 - fast --help

    flags = _ScopeFlags(
        since,
        until,
        backfill_id,
        lane,
        metrics,
        metric_set,
        metric_set_version,
        agent_version,
        tool,
        environment,
        scenario_by,
        slice_by,
        pool_versions,
    )
    config = settings()
    scope = _scope(flags)
    gates = parse_gates(fail_under, scope.metric_ids)
    if html is not None and not html.parent.is_dir():  # before reading every record
        invalid(f"cannot write --html {html} (no directory {html.parent})")
    with store(config, existing=True) as opened:
        result = build_report(opened, scope)
    _show(result, as_json=as_json, html=html)
    enforce(result, gates, min_coverage, to_stderr=as_json or html is not None)


def _show(result: EvalReport, *, as_json: bool, html: Path | None) -> None:
    from worker.reporting import render_html, render_terminal  # noqa: PLC0415 - fast --help

    if html is not None:
        try:
            html.write_text(render_html(result), encoding="utf-8")
        except OSError as exc:
            invalid(f"cannot write --html {html} ({type(exc).__name__})")
        err.print(f"HTML report written to {html}", highlight=False, markup=False, soft_wrap=True)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
    elif html is None:
        out.print(render_terminal(result))
    if result.synthetic and (as_json or html is not None):
        err.print("[bold yellow]SYNTHETIC judge[/]: placeholder answers, not a model's judgment")


def _metric_ids(text: str | None) -> tuple[str, ...]:
    """The ``--metrics`` list; an id no metric set has is refused, naming the known ones."""
    from worker.metric_sets import reported_metric_ids  # noqa: PLC0415 - fast --help

    wanted = tuple(m.strip() for m in (text or "").split(",") if m.strip())
    known = reported_metric_ids()
    unknown = [m for m in wanted if m not in known]
    if unknown:
        invalid(f"--metrics: unknown metric id {', '.join(unknown)}; known: {', '.join(known)}")
    return wanted


def _scope(flags: _ScopeFlags) -> ReportScope:
    from worker.reporting import ReportScope  # noqa: PLC0415 - fast --help

    now = datetime.now(UTC)
    since = when("since", flags.since, "30m, 6h, 7d", now) if flags.since else None
    until = when("until", flags.until, "30m, 6h, 7d", now) if flags.until else None
    metric_ids = _metric_ids(flags.metrics)
    if flags.lane is not None and flags.lane not in _LANES:
        invalid(f"--lane: unknown lane {flags.lane}; known: {', '.join(_LANES)}")
    try:
        return ReportScope.model_validate(
            {
                "since": since,
                "until": until,
                "backfill_id": flags.backfill_id,
                "lane": flags.lane,
                "metric_set": flags.metric_set,
                "metric_set_version": flags.metric_set_version,
                "agent_version": flags.agent_version,
                "tool": flags.tool,
                "environment": flags.environment,
                "metric_ids": metric_ids,
                "scenario_by": flags.scenario_by,
                "slice_by": flags.slice_by,
                "pool_versions": flags.pool_versions,
            }
        )
    except ValidationError as exc:
        names = sorted({str(e["loc"][0]).replace("_", "-") for e in exc.errors()})
        invalid(f"invalid report option: check --{', --'.join(names)}")
