"""The same file sent live and under two backfill ids is evaluated and counted once per unit.

A real worker, the session's Redis and the stand-in System One judge (an HTTP server): the six
traces of one file are enqueued on the live lane, then backfilled twice under different ids.
The issue's symptom was 18 evaluations and a pass rate over 15/15; now each unit is one
snapshot with one evaluation and three sends, and the report says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.producer.producer_kit import write_lines
from tests.queue.queue_kit import REPO, WorkerProcess, wait_until, worker_env
from worker.judges.testing import serve_in_thread
from worker.store import RecordScope, Store

pytestmark = pytest.mark.services

UNITS = 6
BACKFILLS = ("bf-first", "bf-second")
TIMEOUT_S = 60.0


def _evalq(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env=worker_env(**env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_file_sent_live_and_under_two_backfill_ids_counts_each_unit_once(
    workdir: Path,
    redis_url: str,
    store_url: str,
    store: Store,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """One evaluation per unit, three sends each; report, backfill read-back and scopes agree."""
    path = workdir / "traces.jsonl"
    write_lines(path, UNITS)
    env = {"broker_url": redis_url, "store_url": store_url}
    with serve_in_thread(p_yes=0.95) as judge:
        start_worker(
            **env,
            judge="systemone",
            judge_url=judge.base_url,
            judge_api_key="e2e-key",
            thresholds="0.2,0.8",
            processes="1",
        )
        _evalq(env, "enqueue", str(path), "--lane", "live")
        wait_until(lambda: store.count_evaluations() == UNITS, TIMEOUT_S, "the live evaluations")
        asked = judge.count
        assert asked > 0
        for backfill_id in BACKFILLS:
            _evalq(env, "backfill", str(path), "--id", backfill_id)
        everything = RecordScope(newest=True)
        wait_until(
            lambda: store.send_counts(everything).sends == 3 * UNITS, TIMEOUT_S, "every send"
        )
        assert judge.count == asked  # the backfills asked the judge nothing more

    assert (store.count_snapshots(), store.count_evaluations()) == (UNITS, UNITS)
    counts = store.send_counts(everything)
    assert (counts.sends, counts.snapshots, counts.duplicates) == (3 * UNITS, UNITS, 2 * UNITS)
    for row in store.iter_evaluation_rows():
        sends = store.sends(row.snapshot_id)
        assert sorted((s.lane, s.rule) for s in sends) == [
            ("backfill", "backfill:bf-first"),
            ("backfill", "backfill:bf-second"),
            ("live", "all"),
        ]
        assert row.sampling_rule == "all"  # the snapshot row keeps its first send's facts
    for backfill_id in BACKFILLS:
        assert store.backfill_counts(backfill_id)[0] == UNITS  # read-back sees live units

    report = json.loads(_evalq(env, "report", "--json").stdout)
    assert (report["snapshots"], report["evaluations"]) == (UNITS, UNITS)
    assert (report["sends"], report["duplicate_sends"]) == (3 * UNITS, 2 * UNITS)
    assert report["superseded_evaluations"] == 0
    assert report["pooled"] is False
    assert len(report["versions"]) == 1
    assert max(m["total"] for m in report["metrics"].values()) == UNITS  # once per unit
    scoped = json.loads(_evalq(env, "report", "--json", "--backfill", BACKFILLS[1]).stdout)
    assert scoped["evaluations"] == UNITS
    live = json.loads(_evalq(env, "report", "--json", "--lane", "live").stdout)
    assert live["evaluations"] == UNITS
    text = " ".join(_evalq(env, "report").stdout.split())  # the terminal wraps lines
    assert f"sends: {3 * UNITS} ({2 * UNITS} duplicate)" in text
