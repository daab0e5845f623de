"""`evalq results` and `evalq report --fail-under` as a user runs them, on a store filled by a
real run (``conftest.filled``: Redis, a worker subprocess, the synthetic judge, SQLite).

Every expected row and number is read straight from the store's tables, never from the code
under test; the commands run as subprocesses of the installed ``evalq`` console script.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.reporting.reporting_kit import Filled, evalq, query

pytestmark = pytest.mark.services

_NEWEST_FIRST = """SELECT e.trace_id, r.metric_id, r.status, r.reason, e.snapshot_id,
    e.metric_set_version
FROM metric_results r JOIN evaluations e ON e.evaluation_id = r.evaluation_id
{where} ORDER BY e.seq DESC, r.position DESC"""
Z95 = 1.959963984540054


def _rows(filled: Filled, where: str = "", params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return query(filled.db_path, _NEWEST_FIRST.format(where=where), params)


def _listed(stdout: str) -> list[tuple[Any, ...]]:
    objects = [json.loads(line) for line in stdout.splitlines()]
    fields = ("trace_id", "metric_id", "status", "reason", "snapshot_id", "metric_set_version")
    return [tuple(o[f] for f in fields) for o in objects]


def _cursor(stderr: str) -> str | None:
    for word, after in zip(stderr.split(), stderr.split()[1:], strict=False):
        if word == "--cursor":
            return after
    return None


def test_results_page_newest_first_and_cursors_walk_every_row(filled: Filled) -> None:
    """Default 50 rows newest first; following --cursor visits all rows once, in SQL order."""
    expected = _rows(filled)
    assert len(expected) > 50
    first = evalq("results", "--json", **filled.env())
    assert first.returncode == 0, first.stderr
    assert _listed(first.stdout) == expected[:50]
    seen = _listed(first.stdout)
    cursor = _cursor(first.stderr)
    while cursor is not None:
        page = evalq("results", "--json", "--limit", "40", "--cursor", cursor, **filled.env())
        assert page.returncode == 0, page.stderr
        seen += _listed(page.stdout)
        cursor = _cursor(page.stderr)
    assert seen == expected


def test_results_filters_select_what_sql_selects(filled: Filled) -> None:
    """--metric, --status (any case), --reason and --since narrow exactly as SQL does."""
    skipped = evalq(
        "results", "--json", "--metric", "grounded", "--status", "skipped", **filled.env()
    )
    assert skipped.returncode == 0, skipped.stderr
    where = "WHERE r.metric_id = ? AND r.status = ?"
    expected = _rows(filled, where, ("grounded", "SKIPPED"))
    assert expected
    assert _listed(skipped.stdout) == expected
    reason = evalq(
        "results", "--json", "--reason", "NO_TOOL_RESULTS", "--limit", "1000", **filled.env()
    )
    assert _listed(reason.stdout) == _rows(filled, "WHERE r.reason = ?", ("NO_TOOL_RESULTS",))
    recent = evalq("results", "--json", "--since", "1h", "--limit", "5", **filled.env())
    assert _listed(recent.stdout) == _rows(filled)[:5]
    future = evalq("results", "--since", "2999-01-01", **filled.env())
    assert (future.returncode, future.stdout) == (0, "")
    assert "no results match" in future.stderr


def test_results_table_groups_rows_under_their_evaluation(filled: Filled) -> None:
    """The table names trace, unit, snapshot and metric-set version once per evaluation."""
    done = evalq("results", "--limit", "7", **filled.env())
    assert done.returncode == 0, done.stderr
    trace, _, _, _, snapshot_id, version = _rows(filled)[0]
    (unit,) = query(
        filled.db_path,
        "SELECT unit_kind || ' ' || unit_event_id FROM snapshots WHERE snapshot_id = ?",
        (snapshot_id,),
    )[0]
    lines = done.stdout.splitlines()
    assert f"trace {trace}  unit {unit}" in lines[0]
    assert lines[1].strip() == f"snapshot {snapshot_id[:16]}  metric set {version}"
    assert "7 shown, newest first; more: --cursor" in done.stderr


def test_results_refuse_unknown_values_naming_the_valid_ones(filled: Filled) -> None:
    """An unknown metric, status, reason or a bad cursor exits 2 and lists what is valid."""
    cases = {
        ("--metric", "groundedd"): "unknown metric id groundedd; known: ",
        ("--status", "PASSED"): "known: DECIDED, INCONCLUSIVE, SKIPPED, ERROR",
        ("--reason", "NO_SUCH_REASON"): "NO_TOOL_RESULTS",
        ("--cursor", "later"): "SEQ:POS",
        ("--limit", "0"): "greater than or equal to 1",
    }
    for args, named in cases.items():
        done = evalq("results", *args, **filled.env())
        assert done.returncode == 2, (args, done.stderr)
        assert named in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


# --- the CI gate ---------------------------------------------------------------------------------


def _weighted_lower(db: Path, metric_id: str) -> tuple[float, float]:
    """(lower bound, coverage) of a metric straight from SQL: Kish-weighted Wilson, DECIDED/all."""
    rows = query(
        db,
        """SELECT r.status, r.passed, s.sampling_weight FROM metric_results r
        JOIN evaluations e ON e.evaluation_id = r.evaluation_id
        JOIN snapshots s ON s.snapshot_id = e.snapshot_id WHERE r.metric_id = ?""",
        (metric_id,),
    )
    verdicts = [(w, bool(p)) for status, p, w in rows if status == "DECIDED" and p is not None]
    total = sum(w for w, _ in verdicts)
    p = sum(w for w, y in verdicts if y) / total
    n = total * total / sum(w * w for w, _ in verdicts)
    z2 = Z95 * Z95
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    coverage = sum(1 for status, _, _ in rows if status == "DECIDED") / len(rows)
    return max(0.0, center - half), coverage


def _gate_line(output: str, metric_id: str) -> str:
    (line,) = [x for x in output.splitlines() if x.startswith(f"gate {metric_id} ")]
    return line


def test_fail_under_passes_at_the_lower_bound_and_fails_above_it(filled: Filled) -> None:
    """The gate line shows the lower bound SQL gives; exit 0 at it, 3 just above it."""
    lower, coverage = _weighted_lower(filled.db_path, "used_tool_result")
    floor = f"{math.floor(coverage * 1e6) / 1e6:.6f}"  # rounded down: never above the coverage
    at = evalq(
        "report",
        "--fail-under",
        f"used_tool_result={math.floor(lower * 1000) / 1000}",
        "--min-coverage",
        floor,
        **filled.env(),
    )
    assert at.returncode == 0, at.stdout + at.stderr
    line = _gate_line(at.stdout, "used_tool_result")
    assert f"lower {lower:.3f}, weighted rate" in line
    assert line.endswith(": PASS")
    above = evalq(
        "report",
        "--json",
        "--fail-under",
        f"used_tool_result={math.ceil(lower * 1000) / 1000 + 0.001}",
        "--min-coverage",
        floor,
        **filled.env(),
    )
    assert above.returncode == 3, above.stderr
    assert json.loads(above.stdout)["metrics"]["used_tool_result"]  # stdout stays the JSON
    assert "FAIL (UNDER_RATE: lower bound under" in _gate_line(above.stderr, "used_tool_result")


def test_fail_under_fails_a_metric_with_too_little_coverage(filled: Filled) -> None:
    """RATE 0 still fails when coverage is under --min-coverage, with LOW_COVERAGE and why."""
    _, coverage = _weighted_lower(filled.db_path, "grounded")
    assert 0 < coverage < 1
    low = evalq(
        "report",
        "--fail-under",
        "grounded=0",
        "--fail-under",
        "tool_choice=0",
        "--min-coverage",
        f"{coverage + 0.001:.6f}",
        **filled.env(),
    )
    assert low.returncode == 3, low.stdout + low.stderr
    line = _gate_line(low.stdout, "grounded")
    assert f"coverage {coverage:.3f}: FAIL (LOW_COVERAGE: coverage under --min-coverage" in line
    floor = f"{math.floor(coverage * 1e6) / 1e6:.6f}"  # rounded down: never above the coverage
    ok = evalq("report", "--fail-under", "grounded=0", "--min-coverage", floor, **filled.env())
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_fail_under_refuses_unknown_metrics_and_fails_absent_ones(filled: Filled) -> None:
    """An unknown id or a bad form exits 2 (config); a known metric never evaluated fails (3)."""
    unknown = evalq("report", "--fail-under", "groundedness=0.5", **filled.env())
    assert unknown.returncode == 2
    assert "--fail-under: unknown metric id groundedness; known: " in unknown.stderr
    bad = evalq("report", "--fail-under", "grounded>0.5", **filled.env())
    assert bad.returncode == 2
    assert "expected METRIC=RATE" in bad.stderr
    absent = evalq("report", "--fail-under", "trajectory_match=0", **filled.env())
    assert absent.returncode == 3
    assert "FAIL (NO_RESULTS" in _gate_line(absent.stdout, "trajectory_match")
    via_env = evalq(
        "report",
        **filled.env(report_fail_under="grounded=0 tool_choice=0", report_min_coverage="0"),
    )
    assert via_env.returncode == 0, via_env.stderr
    assert len([x for x in via_env.stdout.splitlines() if x.startswith("gate ")]) == 2


def test_worker_log_names_the_trace_beside_the_snapshot(filled: Filled) -> None:
    """Each recorded evaluation's log line carries its trace id (and never the content)."""
    log = (filled.workdir / "worker.log").read_text(encoding="utf-8")
    for snapshot_id, trace_id, version in query(
        filled.db_path, "SELECT snapshot_id, trace_id, metric_set_version FROM evaluations"
    ):
        assert f"evaluation recorded: {snapshot_id[:16]} ({version}, trace {trace_id})" in log
