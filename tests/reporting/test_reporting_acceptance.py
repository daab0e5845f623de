"""`evalq status` and `evalq report` on a store filled by a real run, checked against direct SQL.

The store is filled once per module (``conftest.filled``): Redis, a real worker subprocess, the
synthetic judge, SQLite. Every expected number below is computed in the test straight from the
store's tables (or Redis), never taken from the code under test.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.reporting.chromium_kit import open_chromium
from tests.reporting.reporting_kit import BACKFILL_ID, BACKFILL_UNITS, Filled, evalq, query
from worker.reporting import PLOT_IDS

pytestmark = pytest.mark.services

REPO = Path(__file__).resolve().parents[2]
MISSING = ("MISSING_FIELDS", "NO_EVIDENCE", "NO_TOOL_RESULTS", "NO_CLAIMS")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _json(*args: str, **env: str) -> dict[str, Any]:
    done = evalq(*args, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _stamp(value: datetime) -> str:
    """The store's SQLite time text for ``value`` (fixed-width UTC ISO, microseconds)."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(p * len(ordered)) - 1]


# --- evalq status --------------------------------------------------------------------------------


def _lane_depth(client: redis.Redis, queue: str) -> int:
    keys = [queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))]
    return sum(int(client.llen(key)) for key in keys)


def test_status_json_matches_redis_and_the_store(filled: Filled) -> None:
    """`evalq status --json`: queues, worker, throughput, dead letters, backfill and decisions."""
    data = _json("status", "--json", **filled.env())
    db, at = filled.db_path, _at(data["generated_at"])

    client = redis.Redis.from_url(filled.broker_url)
    try:
        for lane in data["broker"]["queues"]["lanes"]:
            assert lane["depth"] == _lane_depth(client, lane["queue"])
        assert data["broker"]["queues"]["unacked_total"] == client.hlen("unacked")
    finally:
        client.close()
    workers = data["broker"]["workers"]
    assert workers["online"] == 1
    assert workers["names"][0].startswith("evalq-")
    assert data["broker"]["error"] is None

    since_5m = _stamp(at - timedelta(minutes=5))
    (recent,) = query(db, "SELECT COUNT(*) FROM evaluations WHERE created_at >= ?", [since_5m])[0]
    assert data["throughput"]["last_5m"] == recent > 0

    dead = query(
        db,
        """SELECT reason, COUNT(*) FROM dead_letters d WHERE NOT EXISTS
        (SELECT 1 FROM redrives r WHERE r.dead_letter_id = d.dead_letter_id) GROUP BY reason""",
    )
    assert data["dead_letters"] == dict(dead) == {"SCHEMA_INVALID": 1}

    (position, enqueued) = query(
        db,
        "SELECT position, enqueued FROM backfill_checkpoints WHERE backfill_id = ? "
        "ORDER BY seq DESC LIMIT 1",
        [BACKFILL_ID],
    )[0]
    (evaluated,) = query(
        db,
        """SELECT COUNT(DISTINCT e.snapshot_id) FROM evaluations e WHERE e.snapshot_id IN
        (SELECT d.snapshot_id FROM sends d WHERE d.rule = ? OR d.rule LIKE ?)""",
        [f"backfill:{BACKFILL_ID}", f"backfill:{BACKFILL_ID}/%"],
    )[0]
    (backfill,) = data["backfills"]
    assert (backfill["backfill_id"], backfill["state"]) == (BACKFILL_ID, "running")
    assert (backfill["read"], backfill["enqueued"], backfill["evaluated"]) == (
        position,
        enqueued,
        evaluated,
    )
    assert evaluated == enqueued == 4

    window_start = _stamp(at - timedelta(seconds=data["decisions"]["window_s"]))
    pairs: Counter[tuple[str, str]] = Counter()
    for status, reason, n in query(
        db,
        """SELECT r.status, r.reason, COUNT(*) FROM metric_results r JOIN evaluations e
        ON e.evaluation_id = r.evaluation_id WHERE e.created_at >= ? GROUP BY 1, 2""",
        [window_start],
    ):
        pairs[(status, reason)] += n
    by_status: Counter[str] = Counter()
    for (status, _), n in pairs.items():
        by_status[status] += n
    timeouts = pairs[("ERROR", "TIMEOUT")]
    expected = {
        "scored": by_status["DECIDED"],
        "inconclusive": by_status["INCONCLUSIVE"],
        "incomplete_trace": pairs[("SKIPPED", "INCOMPLETE_TRACE")],
        "missing_evidence": sum(pairs[("SKIPPED", r)] for r in MISSING),
        "evaluation_limit": pairs[("SKIPPED", "EVALUATION_LIMIT")],
        "timeout": timeouts,
        "error": by_status["ERROR"] - timeouts,
    }
    decisions = {d["code"]: d for d in data["decisions"]["decisions"]}
    assert {code: decisions[code]["n"] for code in expected} == expected
    assert min(expected["scored"], expected["incomplete_trace"], expected["missing_evidence"]) > 0
    assert decisions["not_ready"] == {
        "code": "not_ready",
        "n": None,
        "known": False,
        "note": decisions["not_ready"]["note"],
    }

    (sampled_out,) = query(
        db, "SELECT SUM(seen - sampled) FROM sampling_tallies WHERE ended_at >= ?", [window_start]
    )[0]
    assert decisions["sampled_out"]["known"] is True
    assert decisions["sampled_out"]["n"] == sampled_out == filled.sampled_out > 0
    (weights,) = query(
        db,
        """SELECT SUM(s.sampling_weight) - COUNT(*) FROM evaluations e JOIN snapshots s
        ON s.snapshot_id = e.snapshot_id WHERE e.created_at >= ?""",
        [window_start],
    )[0]
    assert data["decisions"]["sampled_out_estimate"] == pytest.approx(weights)


def test_status_thresholds_exit_3_and_list_every_breach(filled: Filled) -> None:
    """Breached thresholds exit 3 listing each one; met thresholds exit 0 (a cron check)."""
    breached = evalq(
        "status",
        "--json",
        "--max-dead-letters",
        "0",
        "--min-workers",
        "2",
        "--max-depth",
        "1000",
        **filled.env(),
    )
    assert breached.returncode == 3, breached.stderr
    listed = json.loads(breached.stdout)["breaches"]
    assert listed == ["workers online 1 < 2", "dead letters 1 > 0"]
    for breach in listed:
        assert f"threshold breached: {breach}" in breached.stderr

    met = evalq("status", "--max-dead-letters", "1", "--min-workers", "1", **filled.env())
    assert met.returncode == 0, met.stderr
    assert "workers online: 1" in met.stdout
    assert "Why not scored" in met.stdout


def test_status_without_a_broker_reports_the_store_part(filled: Filled) -> None:
    """No EVALQ_BROKER_URL: the store part is reported and the broker marked not configured."""
    data = _json("status", "--json", store_url=filled.store_url)
    assert data["broker"] == {
        "configured": False,
        "url": None,
        "error": "BROKER_NOT_CONFIGURED",
        "queues": None,
        "workers": None,
    }
    (open_dead,) = query(filled.db_path, "SELECT COUNT(*) FROM dead_letters")[0]
    assert data["dead_letters_open"] == open_dead == 1
    unknown = evalq("status", "--min-workers", "1", store_url=filled.store_url)
    assert unknown.returncode == 3
    assert "workers unknown (BROKER_NOT_CONFIGURED)" in unknown.stderr
    assert "broker: not configured" in unknown.stdout


# --- evalq report --------------------------------------------------------------------------------


def _metric_counts(db: Path) -> dict[str, dict[str, dict[str, int]]]:
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for metric_id, status, reason, n in query(
        db, "SELECT metric_id, status, reason, COUNT(*) FROM metric_results GROUP BY 1, 2, 3"
    ):
        entry = counts.setdefault(metric_id, {"by_status": {}, "by_reason": {}})
        entry["by_status"][status] = entry["by_status"].get(status, 0) + n
        entry["by_reason"][reason] = entry["by_reason"].get(reason, 0) + n
    return counts


_RATES = """SELECT metric_id,
    SUM(status = 'DECIDED' AND passed = 1),
    SUM(status = 'DECIDED' AND passed IS NOT NULL),
    SUM(status = 'DECIDED'),
    COUNT(*),
    SUM(status = 'SKIPPED' AND reason IN ('MISSING_FIELDS', 'NO_EVIDENCE', 'NO_TOOL_RESULTS',
        'NO_CLAIMS'))
FROM metric_results GROUP BY metric_id"""


def _check_rates(data: dict[str, Any], db: Path) -> None:
    for metric_id, passed, verdicts, decided, total, missing in query(db, _RATES):
        m = data["metrics"][metric_id]
        for key, num, den in (
            ("pass_rate", passed, verdicts),
            ("coverage", decided, total),
            ("missing_evidence", missing, total),
        ):
            rate = m[key]
            assert (rate["numerator"], rate["denominator"]) == (num, den), (metric_id, key)
            assert rate["value"] == pytest.approx(num / den)
            assert rate["low"] <= rate["value"] <= rate["high"]


def _check_weighted(data: dict[str, Any], db: Path) -> None:
    rows = query(
        db,
        """SELECT r.metric_id, s.sampling_weight, r.passed FROM metric_results r
        JOIN evaluations e ON e.evaluation_id = r.evaluation_id
        JOIN snapshots s ON s.snapshot_id = e.snapshot_id
        WHERE r.status = 'DECIDED' AND r.passed IS NOT NULL""",
    )
    by_metric: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for metric_id, weight, passed in rows:
        by_metric[metric_id].append((weight, passed))
    assert data["weighted"] is True
    for metric_id, pairs in by_metric.items():
        total = sum(w for w, _ in pairs)
        weighted = data["metrics"][metric_id]["weighted"]["pass_rate"]
        assert weighted["value"] == pytest.approx(sum(w * y for w, y in pairs) / total)
        assert weighted["effective_n"] == pytest.approx(total**2 / sum(w * w for w, _ in pairs))
        assert weighted["effective_n"] < len(pairs)  # unequal weights cost effective sample size


_GOLD_ROWS = """SELECT r.metric_id, r.status, r.passed, r.label, s.tool,
    json_type(c.content, '$.labels.' || r.metric_id),
    json_extract(c.content, '$.labels.' || r.metric_id || '.label'),
    json_extract(c.content, '$.labels.' || r.metric_id || '.passed')
FROM metric_results r JOIN evaluations e ON e.evaluation_id = r.evaluation_id
JOIN snapshots s ON s.snapshot_id = e.snapshot_id
JOIN snapshot_contents c ON c.snapshot_id = e.snapshot_id
WHERE json_extract(c.content, '$.labels') <> '{}'"""


def _f_summary(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """docs/semantics.md §8 counting, written out independently for the check."""
    keys = ("total", "labelled", "correct", "incorrect", "inconclusive", "skipped", "errors")
    out = Counter(dict.fromkeys((*keys, "unscored"), 0))
    for status, passed, label, has_gold, gold_label, gold_passed in rows:
        out["total"] += 1
        out["labelled"] += has_gold is not None
        if status != "DECIDED":
            out[
                {"INCONCLUSIVE": "inconclusive", "SKIPPED": "skipped", "ERROR": "errors"}[status]
            ] += 1
            continue
        if has_gold is None:
            continue
        actual, wanted = (label, gold_label) if gold_label is not None else (passed, gold_passed)
        if actual is None:
            out["unscored"] += 1
        else:
            out["correct" if actual == wanted else "incorrect"] += 1
    return dict(out)


def _check_gold(data: dict[str, Any], db: Path) -> None:
    rows = query(db, _GOLD_ROWS)
    by_metric: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    by_scenario: dict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
    for metric_id, status, passed, label, tool, *gold in rows:
        by_metric[metric_id].append((status, passed, label, *gold))
        by_scenario[(tool or "(none)", metric_id)].append((status, passed, label, *gold))
    gold = data["gold"]
    for metric_id, metric_rows in by_metric.items():
        expected = _f_summary(metric_rows)
        summary = gold["metrics"][metric_id]
        assert {k: summary[k] for k in expected} == expected, metric_id
        labelled = expected["labelled"]
        accuracy = expected["correct"] / labelled if labelled else 0.0
        assert summary["accuracy"] == pytest.approx(accuracy)
    for (scenario, metric_id), scenario_rows in by_scenario.items():
        expected = _f_summary(scenario_rows)
        summary = gold["scenarios"][scenario][metric_id]
        assert {k: summary[k] for k in expected} == expected, (scenario, metric_id)
    tool_choice = gold["metrics"]["tool_choice"]
    assert tool_choice["incorrect"] > 0  # some labels disagree with the judge
    assert tool_choice["correct"] > 0
    confusion = gold["confusion"]["tool_choice"]
    decided = Counter(
        (g_label, label if status == "DECIDED" else status)
        for metric_id, status, _p, label, _t, _h, g_label, _gp in rows
        if metric_id == "tool_choice"
    )
    assert {(e, a): n for e, row in confusion["counts"].items() for a, n in row.items() if n} == (
        dict(decided)
    )


def _check_calibration(data: dict[str, Any], db: Path) -> None:
    rows = query(
        db,
        """SELECT json_extract(r.evidence, '$.probabilities.' || r.label),
            r.label = json_extract(c.content, '$.labels.tool_choice.label')
        FROM metric_results r JOIN evaluations e ON e.evaluation_id = r.evaluation_id
        JOIN snapshot_contents c ON c.snapshot_id = e.snapshot_id
        WHERE r.metric_id = 'tool_choice' AND r.label IS NOT NULL
            AND json_type(c.content, '$.labels.tool_choice') IS NOT NULL""",
    )
    bins: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for p, hit in rows:
        bins[min(int(p * 10), 9)].append((p, hit))
    ece = sum(
        len(b) / len(rows) * abs(sum(h for _, h in b) / len(b) - sum(p for p, _ in b) / len(b))
        for b in bins.values()
    )
    (table,) = [c for c in data["gold"]["calibration"] if c["metric_id"] == "tool_choice"]
    assert (table["n"], table["kind"], table["probability_source"]) == (
        len(rows),
        "top_label",
        "synthetic",
    )
    assert table["ece"] == pytest.approx(ece)
    assert [b["n"] for b in table["bins"]] == [len(bins.get(i, [])) for i in range(10)]


def _check_latency_usage(data: dict[str, Any], db: Path) -> None:
    elapsed_ms = [e * 1000 for (e,) in query(db, "SELECT elapsed_s FROM evaluations")]
    assert data["latency"]["p50_ms"] == pytest.approx(_nearest_rank(elapsed_ms, 0.5))
    assert data["latency"]["p95_ms"] == pytest.approx(_nearest_rank(elapsed_ms, 0.95))
    assert sum(b["n"] for b in data["latency"]["histogram"]) == len(elapsed_ms)
    (requests,) = query(db, "SELECT SUM(requests) FROM evaluations")[0]
    (answered, tokens_in, tokens_out) = query(
        db,
        """SELECT COUNT(*), SUM(json_extract(u.value, '$.usage.input_tokens')),
            SUM(json_extract(u.value, '$.usage.output_tokens'))
        FROM evaluations e, json_each(e.usage) u WHERE json_type(u.value, '$.usage') = 'object'""",
    )[0]
    usage = data["usage"]
    assert (usage["requests"], usage["responses_with_usage"]) == (requests, answered)
    assert (usage["input_tokens"], usage["output_tokens"]) == (tokens_in, tokens_out)
    assert usage["incomplete"] is (answered < requests)


def _check_outcomes(data: dict[str, Any], db: Path, traces: int) -> None:
    rows = query(
        db,
        """SELECT r.metric_id, CASE WHEN r.status = 'DECIDED' THEN
                CASE r.passed WHEN 1 THEN 'passed' WHEN 0 THEN 'failed' ELSE 'decided' END
            ELSE lower(r.status) END, o.name, o.value, COUNT(*)
        FROM outcome_links l JOIN outcomes o ON o.event_id = l.outcome_event_id
        JOIN metric_results r ON r.evaluation_id = l.evaluation_id GROUP BY 1, 2, 3, 4""",
    )
    expected = {(m, j, o, v): n for m, j, o, v, n in rows}
    reported = {
        (r["metric_id"], r["judgment"], r["outcome"], r["value"]): r["n"]
        for r in data["outcomes"]["rows"]
        if r["metric_id"] != "(evaluation)"
    }
    assert reported == expected
    (linked,) = query(db, "SELECT COUNT(DISTINCT evaluation_id) FROM outcome_links")[0]
    assert data["outcomes"]["linked_evaluations"] == linked == traces
    verdicts = query(
        db,
        """SELECT l.evaluation_id, MIN(r.status = 'DECIDED' AND r.passed = 1), o.name
        FROM outcome_links l JOIN outcomes o ON o.event_id = l.outcome_event_id
        JOIN metric_results r ON r.evaluation_id = l.evaluation_id GROUP BY 1, 3""",
    )
    overall = Counter(("passed" if ok else "not passed", name) for _, ok, name in verdicts)
    reported_overall: Counter[tuple[str, str]] = Counter()
    for r in data["outcomes"]["rows"]:
        if r["metric_id"] == "(evaluation)":
            reported_overall[(r["judgment"], r["outcome"])] += r["n"]
    assert reported_overall == overall


def test_report_json_matches_the_store(filled: Filled) -> None:
    """`evalq report --json`: every count, rate and summary equals what SQL computes."""
    data = _json("report", "--json", **filled.env())
    db = filled.db_path
    (snapshots,) = query(db, "SELECT COUNT(*) FROM snapshots")[0]
    (evaluations,) = query(db, "SELECT COUNT(*) FROM evaluations")[0]
    assert (data["snapshots"], data["evaluations"]) == (snapshots, evaluations)
    # The backfill re-sent the live examples: one evaluation per unit, the re-sends as sends.
    assert evaluations == len(filled.live_ids) + len(filled.labelled_ids)
    (sends,) = query(db, "SELECT COUNT(*) FROM sends")[0]
    assert (data["sends"], data["duplicate_sends"]) == (sends, sends - snapshots)
    assert data["duplicate_sends"] >= BACKFILL_UNITS
    assert data["superseded_evaluations"] == 0
    assert {
        m: {k: v[k] for k in ("by_status", "by_reason")} for m, v in data["metrics"].items()
    } == (_metric_counts(db))
    assert data["synthetic"] is True
    assert [j["kind"] for j in data["judges"]] == ["synthetic"]
    _check_rates(data, db)
    _check_weighted(data, db)
    _check_gold(data, db)
    _check_calibration(data, db)
    _check_latency_usage(data, db)
    _check_outcomes(data, db, len(filled.outcome_traces))
    (seen, sampled) = query(db, "SELECT SUM(seen), SUM(sampled) FROM sampling_tallies")[0]
    sampling = data["sampling"]
    assert (sampling["seen"], sampling["sampled"], sampling["sampled_out"]) == (
        seen,
        sampled,
        seen - sampled,
    )


def test_report_scope_filters_select_what_sql_selects(filled: Filled) -> None:
    """--backfill, slices, --metrics, --metric-set, --since/--until narrow like SQL does."""
    db, env = filled.db_path, filled.env()
    backfill = _json("report", "--json", "--backfill", BACKFILL_ID, **env)
    (in_backfill,) = query(
        db,
        """SELECT COUNT(*) FROM evaluations e WHERE e.snapshot_id IN
        (SELECT d.snapshot_id FROM sends d WHERE d.rule = ? OR d.rule LIKE ?)""",
        [f"backfill:{BACKFILL_ID}", f"backfill:{BACKFILL_ID}/%"],
    )[0]
    assert backfill["evaluations"] == in_backfill == BACKFILL_UNITS
    live = _json("report", "--json", "--lane", "live", **env)
    (on_live,) = query(
        db,
        """SELECT COUNT(*) FROM evaluations e WHERE e.snapshot_id IN
        (SELECT d.snapshot_id FROM sends d WHERE d.lane = 'live')""",
    )[0]
    assert live["evaluations"] == on_live > 0
    lane_backfill = _json("report", "--json", "--lane", "backfill", **env)
    assert lane_backfill["evaluations"] == BACKFILL_UNITS
    bad_lane = evalq("report", "--lane", "outcomes", **env)
    assert bad_lane.returncode == 2
    assert "--lane: unknown lane outcomes; known: live, backfill" in bad_lane.stderr
    assert backfill["sampling"] is None

    sliced = _json("report", "--json", "--agent-version", "v2", "--tool", "get_order", **env)
    (in_slice, results) = query(
        db,
        """SELECT COUNT(DISTINCT e.evaluation_id), COUNT(*) FROM evaluations e
        JOIN snapshots s ON s.snapshot_id = e.snapshot_id
        JOIN metric_results r ON r.evaluation_id = e.evaluation_id
        WHERE s.agent_version = 'v2' AND s.tool = 'get_order'""",
    )[0]
    assert sliced["evaluations"] == in_slice > 0
    assert sum(m["total"] for m in sliced["metrics"].values()) == results
    assert sliced["gold"]["labelled_evaluations"] == in_slice

    chosen = _json("report", "--json", "--metrics", "tool_choice,grounded", **env)
    assert set(chosen["metrics"]) == {"tool_choice", "grounded"}
    other_set = _json("report", "--json", "--metric-set", "agent+trajectory", **env)
    (agent_set,) = query(db, "SELECT COUNT(*) FROM evaluations WHERE metric_set = 'agent'")[0]
    assert other_set["evaluations"] == 0
    assert _json("report", "--json", "--metric-set", "agent", **env)["evaluations"] == agent_set

    future = _json("report", "--json", "--since", "2999-01-01", **env)
    past = _json("report", "--json", "--until", "2000-01-01T00:00:00Z", **env)
    recent = _json("report", "--json", "--since", "1h", **env)
    (total,) = query(db, "SELECT COUNT(*) FROM evaluations")[0]
    assert (future["evaluations"], past["evaluations"], recent["evaluations"]) == (0, 0, total)
    assert future["metrics"] == {}

    bad = evalq("report", "--since", "yesterday-ish", **env)
    assert bad.returncode == 2
    assert "--since" in bad.stderr


def test_report_terminal_output_says_synthetic(filled: Filled) -> None:
    """The default terminal report shows SYNTHETIC prominently, metrics, gold and outcomes."""
    done = evalq("report", **filled.env())
    assert done.returncode == 0, done.stderr
    for text in ("SYNTHETIC JUDGE", "tool_choice", "Against gold", "Outcome-linked", "Calibration"):
        assert text in done.stdout, text


# --- HTML in headless Chromium --------------------------------------------------------------------

_PLOTS_JS = """[...document.querySelectorAll('svg[data-plot]')].map(e => {
    const box = e.getBoundingClientRect();
    return {id: e.id, width: box.width, height: box.height,
            marks: e.querySelectorAll('rect, circle, polyline').length};
})"""


def test_html_report_renders_in_headless_chromium(filled: Filled, tmp_path: Path) -> None:
    """The --html page in Chromium: no console or load problem, plots drawn, SYNTHETIC banner."""
    page = tmp_path / "report.html"
    done = evalq("report", "--html", str(page), **filled.env())
    assert done.returncode == 0, done.stderr
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html
    assert "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no CDN
    with open_chromium() as browser:
        run = browser.load(page.as_uri())
        assert run.problems == []
        plots = browser.evaluate(_PLOTS_JS)
        assert [p["id"] for p in plots] == list(PLOT_IDS)
        for plot in plots:
            assert min(plot["width"], plot["height"]) > 0, plot
            assert plot["marks"] > 0, plot  # every plot has data in this run
        banner = browser.evaluate("document.getElementById('synthetic-banner').innerText")
        assert "SYNTHETIC JUDGE" in banner
        shot = tmp_path / "report.png"
        width, height = browser.screenshot(shot)
        if os.environ.get("EVALQ_TEST_UPDATE_SCREENSHOT") == "1":
            # The committed screenshot (README): the header, figures and every plot.
            plots_end = browser.evaluate(
                "Math.ceil(document.getElementById('plots').getBoundingClientRect().bottom"
                " + window.scrollY + 16)"
            )
            browser.screenshot(REPO / "docs" / "report-screenshot.png", max_height=plots_end)
    assert shot.read_bytes().startswith(PNG_MAGIC)
    assert (width, height > 2000) == (1000, True)


def test_chromium_harness_sees_console_errors_and_failed_loads(tmp_path: Path) -> None:
    """The detector used above reports a console error, an exception and a missing resource."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<img src="missing.png"><script>console.error("boom"); notDefined();</script>'
        "</body></html>",
        encoding="utf-8",
    )
    with open_chromium() as browser:
        run = browser.load(page.as_uri())
    kinds = Counter(p["method"] for p in run.problems)
    assert kinds["Runtime.consoleAPICalled"] == 1
    assert kinds["Runtime.exceptionThrown"] == 1
    assert any(
        "ERR_FILE_NOT_FOUND" in p["params"]["entry"]["text"]
        for p in run.problems
        if p["method"] == "Log.entryAdded"
    )
