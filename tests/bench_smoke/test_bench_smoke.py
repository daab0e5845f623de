"""Each benchmark script runs end to end in ``--quick`` mode and prints its result table.

Benchmarks are not tests: the figures of a quick run mean nothing and are not checked. What is
checked is that every script still starts its services, drives the real pipeline, stops what it
started and prints a table row per figure, so the benchmarks do not rot between full runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench._kit import REPO

pytestmark = pytest.mark.services

SCRIPTS = {
    "p1_judge_bound.py": ["P1 judge-bound"],
    "p2_batched_ceiling.py": ["P2 zero-latency judge"],
    "p3_producer.py": ["P3 producer enqueue", "P3 producer memory"],
    "p4_stalled_judge.py": ["P4 judge never answers"],
    "p5_worker_memory.py": ["P5 worker RSS"],
    "live_latency.py": ["Live P95 under backfill"],
    "store_writes.py": ["sqlite store write", "postgresql store write"],
    "path_cost.py": ["budget: X0 = 1.3 N", "X0 drain: worker + stand-in", "part: judge client"],
}
HEADER = "figure"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_bench_script_prints_its_table(script: str) -> None:
    """``bench/<script> --quick`` exits 0 and prints the table header and its figure rows."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.split()[:2] == [HEADER, "measured"] for line in lines if line.strip())
    for figure in SCRIPTS[script]:
        rows = [line for line in lines if line.startswith(figure)]
        assert len(rows) == 1, done.stdout
        assert (" PASS " in rows[0]) or (" FAIL " in rows[0]), rows[0]
