"""``evalq results``: recorded metric results, newest first, one page at a time (read-only).

The terminal twin of the result browser: which traces a metric failed or skipped, and why. Rows
carry ids, the unit, status, reason code and score/label — never evidence or content. A page is
one ``LIMIT`` query (``--limit``); after a full page the cursor of the next one is printed on
stderr (``--cursor``), so stdout stays the rows alone (``--json``: one object per line).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from ._app import err, out
from ._common import invalid, settings, store
from ._options import in_range
from ._when import when

if TYPE_CHECKING:
    from worker.store import ListedResult, ResultCursor, ResultQuery, Store

__all__ = ["EPILOG", "results"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 10_000
EPILOG = (
    "Example: evalq results --metric grounded --status DECIDED --since 24h --json  "
    "(read-only; every filter narrows; unknown values are refused naming the valid ones)"
)


def results(
    *,
    metric: Annotated[
        str | None,
        typer.Option("--metric", envvar="EVALQ_RESULTS_METRIC", help="Only this metric id"),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            envvar="EVALQ_RESULTS_STATUS",
            help="Only this status: DECIDED | INCONCLUSIVE | SKIPPED | ERROR (any case)",
        ),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option("--reason", envvar="EVALQ_RESULTS_REASON", help="Only this reason code"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            envvar="EVALQ_RESULTS_SINCE",
            help="Evaluations created at/after: ISO time or a duration ago (30m, 6h, 7d)",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            envvar="EVALQ_RESULTS_LIMIT",
            callback=in_range(1, MAX_LIMIT),
            help=f"Rows per page (at most {MAX_LIMIT})",
        ),
    ] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        typer.Option(
            "--cursor",
            envvar="EVALQ_RESULTS_CURSOR",
            help="Next page: the SEQ:POS printed after a full page",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", envvar="EVALQ_RESULTS_JSON", help="One JSON object per line"),
    ] = False,
    superseded: Annotated[
        bool,
        typer.Option(
            "--superseded",
            envvar="EVALQ_RESULTS_SUPERSEDED",
            help="Also results of evaluations a newer one of the same unit and version replaced",
        ),
    ] = False,
) -> None:
    """Recorded results, newest first: trace, unit, status, reason, score/label, snapshot.

    Each unit's newest evaluation per metric-set version, as ``evalq report`` counts them;
    --superseded lists the earlier ones too.
    """
    _check_metric(metric)
    status = _status(status)
    query = _query(
        metric=metric,
        status=status,
        reason=reason,
        since=since,
        limit=limit,
        cursor=cursor,
        newest=not superseded,
    )
    config = settings()
    with store(config, existing=True) as opened:
        _check_reason(opened, reason)
        page, more = opened.list_results(query)
    _show(page, as_json=as_json)
    _say_more(page, more)


def _check_metric(metric: str | None) -> None:
    from worker.metric_sets import reported_metric_ids  # noqa: PLC0415 - fast --help

    known = reported_metric_ids()
    if metric is not None and metric not in known:
        invalid(f"--metric: unknown metric id {metric}; known: {', '.join(known)}")


def _status(status: str | None) -> str | None:
    """The status named (any case), or the refusal listing the four."""
    from worker.store import StatusName  # noqa: PLC0415 - fast --help

    if status is None:
        return None
    known = get_args(StatusName)
    if status.upper() not in known:
        invalid(f"--status: unknown status {status}; known: {', '.join(known)}")
    return status.upper()


def _engine_reasons() -> frozenset[str]:
    from worker.evaluation import Reason  # noqa: PLC0415 - fast --help

    return frozenset(v for k, v in vars(Reason).items() if k.isupper() and isinstance(v, str))


def _check_reason(opened: Store, reason: str | None) -> None:
    """The engine's codes, and any other code a (custom) metric recorded, are accepted."""
    if reason is None or reason in _engine_reasons():
        return
    recorded = opened.recorded_reasons()
    if reason not in recorded:
        known = ", ".join(sorted(_engine_reasons() | set(recorded)))
        invalid(f"--reason: unknown reason code {reason}; known: {known}")


def _query(
    *,
    metric: str | None,
    status: str | None,
    reason: str | None,
    since: str | None,
    limit: int,
    cursor: str | None,
    newest: bool,
) -> ResultQuery:
    from worker.store import RecordScope, ResultCursor, ResultQuery  # noqa: PLC0415

    after = when("since", since, "30m, 6h, 7d", datetime.now(UTC)) if since else None
    before = None
    if cursor is not None:
        try:
            before = ResultCursor.parse(cursor)
        except ValueError as exc:
            invalid(f"--cursor: {exc}")
    scope = RecordScope(since=after, newest=newest)
    return ResultQuery.model_validate(
        {
            "metric_id": metric,
            "status": status,
            "reason": reason,
            "scope": scope,
            "before": before,
            "limit": limit,
        }
    )


def _outcome(row: ListedResult) -> str:
    """``pass 0.91`` / ``fail 0.12`` / the label / ``-``: what the result decided."""
    score = "" if row.score is None else f" {row.score:.2f}"
    if row.passed is not None:
        return ("pass" if row.passed else "fail") + score
    if row.label is not None:
        return row.label + score
    return score.strip() or "-"


def _unit(row: ListedResult) -> str:
    return row.unit_kind if row.unit_event_id is None else f"{row.unit_kind} {row.unit_event_id}"


def _json(row: ListedResult) -> dict[str, Any]:
    data = row.model_dump(mode="json", exclude={"cursor"})
    data["cursor"] = str(row.cursor)
    return data


def _heading(row: ListedResult) -> tuple[str, str]:
    """The evaluation's two lines: when, trace and unit; then snapshot and metric-set version."""
    when_ = row.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"{when_}  trace {row.trace_id}  unit {_unit(row)}",
        f"  snapshot {row.snapshot_id[:16]}  metric set {row.metric_set_version}",
    )


def _lines(page: tuple[ListedResult, ...]) -> list[str]:
    """Rows grouped under their evaluation (they share trace, unit, snapshot and version)."""
    metric_w = max(len(r.metric_id) for r in page)
    reason_w = max(len(r.reason) for r in page)
    lines: list[str] = []
    for n, row in enumerate(page):
        if n == 0 or page[n - 1].evaluation_id != row.evaluation_id:
            lines.extend(_heading(row))
        cells = f"{row.metric_id:<{metric_w}}  {row.status:<12}  {row.reason:<{reason_w}}"
        lines.append(f"    {cells}  {_outcome(row)}")
    return lines


def _show(page: tuple[ListedResult, ...], *, as_json: bool) -> None:
    if as_json:
        for row in page:
            sys.stdout.write(json.dumps(_json(row), sort_keys=True) + "\n")
        return
    if not page:
        err.print("no results match", highlight=False, markup=False)
        return
    for line in _lines(page):  # plain text: a trace id or reason is data, never Rich markup
        out.print(line, highlight=False, markup=False, soft_wrap=True)


def _say_more(page: tuple[ListedResult, ...], more: ResultCursor | None) -> None:
    if more is not None:
        err.print(
            f"{len(page)} shown, newest first; more: --cursor {more}",
            highlight=False,
            markup=False,
        )
