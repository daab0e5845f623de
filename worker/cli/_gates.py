"""``evalq report --fail-under METRIC=RATE``: the CI gate's flags, checks and lines.

The gates are decided by :func:`worker.reporting.check_gates` on the report's own numbers (the
95 % interval's lower bound and scorable coverage); this module parses the flags, refuses
unknown metrics before the store is read, prints one line per gate and exits
:data:`worker.reporting.GATE_EXIT_CODE` (3) when any fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ._app import err, out
from ._common import invalid
from ._options import in_range

if TYPE_CHECKING:
    from worker.reporting import EvalReport, Gate

__all__ = ["FailUnderOpt", "MinCoverageOpt", "enforce", "parse_gates"]

FailUnderOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--fail-under",
        envvar="EVALQ_REPORT_FAIL_UNDER",
        metavar="METRIC=RATE",
        help="CI gate, repeatable: exit 3 unless the pass rate's 95% lower bound is at least "
        "RATE and coverage is at least --min-coverage",
    ),
]
MinCoverageOpt = Annotated[
    float,
    typer.Option(
        "--min-coverage",
        envvar="EVALQ_REPORT_MIN_COVERAGE",
        callback=in_range(0, 1),
        help="Scorable coverage a --fail-under metric needs",
    ),
]


def parse_gates(texts: list[str] | None, wanted_metrics: tuple[str, ...]) -> tuple[Gate, ...]:
    """The ``--fail-under`` gates; a bad form or a metric no set has is refused (exit 2)."""
    from worker.metric_sets import reported_metric_ids  # noqa: PLC0415 - fast --help
    from worker.reporting import Gate  # noqa: PLC0415

    gates = []
    for text in texts or ():
        try:
            gates.append(Gate.parse(text))
        except ValueError as exc:
            invalid(f"--fail-under {exc}")
    known = reported_metric_ids()
    unknown = [g.metric_id for g in gates if g.metric_id not in known]
    if unknown:
        invalid(f"--fail-under: unknown metric id {', '.join(unknown)}; known: {', '.join(known)}")
    left_out = [g.metric_id for g in gates if wanted_metrics and g.metric_id not in wanted_metrics]
    if left_out:
        invalid(f"--fail-under: {', '.join(left_out)} is not among --metrics")
    return tuple(gates)


def enforce(
    report: EvalReport, gates: tuple[Gate, ...], min_coverage: float, *, to_stderr: bool
) -> None:
    """One line per gate (stderr when stdout holds JSON), then exit 3 if any gate failed."""
    from worker.reporting import GATE_EXIT_CODE, check_gates  # noqa: PLC0415 - fast --help

    if not gates:
        return
    console = err if to_stderr else out
    results = check_gates(report, gates, min_coverage)
    for result in results:
        console.print(f"gate {result.line()}", highlight=False, markup=False, soft_wrap=True)
    if not all(r.passed for r in results):
        raise typer.Exit(GATE_EXIT_CODE)
