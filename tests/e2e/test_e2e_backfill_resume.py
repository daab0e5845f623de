"""`evalq backfill` killed half-way (SIGKILL) and resumed: every line evaluated exactly once.

The issue's figure is 100 000 lines; CI runs ``EVALQ_TEST_E2E_LINES`` (default 3 000) so the test
stays well under a minute on two cores. The full-size run is the same test::

    EVALQ_TEST_E2E_LINES=100000 EVALQ_TEST_E2E_TIMEOUT_S=900 .venv/bin/python -m pytest -q \\
        --timeout 1800 tests/e2e/test_e2e_backfill_resume.py

(about 6 minutes on two cores: kill at 50 000, resume, 100 000 evaluations, then 100 000 re-sent
snapshots absorbed as duplicates).

Deliveries are counted by the worker itself (its ``evalq_evaluations_total`` counter by outcome on
``/metrics``): first-time evaluations must equal the line count, and every re-sent snapshot must
show up as a ``duplicate`` that wrote nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from producer._backfill import COMPLETE_PREFIX, RedisQueueDepth
from tests.producer.producer_kit import write_lines
from tests.queue.queue_kit import REPO, WorkerProcess, wait_until, worker_env
from worker.embedded import free_port
from worker.store import Store

pytestmark = pytest.mark.services

LINES = int(os.environ.get("EVALQ_TEST_E2E_LINES", "3000"))
TIMEOUT_S = float(os.environ.get("EVALQ_TEST_E2E_TIMEOUT_S", "90"))
BACKFILL_ID = "e2e-resume"
BATCH = 100  # snapshots per checkpoint: at most this many are re-sent after a kill
PER_MESSAGE = "50"  # EVALQ_BATCH_SIZE: snapshots per queue message
EVALQ = [sys.executable, "-m", "worker.cli"]


def _evalq(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EVALQ, *args],
        env=worker_env(**env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _deliveries(port: int) -> dict[str, int]:
    """The worker's backfill-lane evaluations by outcome (``ok``, ``duplicate``, …)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "evalq_evaluations_total" and sample.labels["lane"] == "backfill":
                counts[sample.labels["outcome"]] = int(sample.value)
    return counts


def _first_time(counts: dict[str, int]) -> int:
    return sum(n for outcome, n in counts.items() if outcome != "duplicate")


def _kill_half_way(first: subprocess.Popen[bytes], store: Store, source: str) -> None:
    """SIGKILL the backfill once its checkpoints cover half of the file (no warm shutdown)."""

    def half_way() -> bool:
        if first.poll() is not None:
            pytest.fail(f"the backfill ended before the kill (status {first.returncode})")
        checkpoint = store.latest_checkpoint(BACKFILL_ID, source)
        return checkpoint is not None and checkpoint.position >= LINES // 2

    wait_until(half_way, TIMEOUT_S, "checkpoints covering half of the file")
    first.kill()
    first.wait(timeout=10)


def _drained(redis_url: str) -> Callable[[], bool]:
    depth = RedisQueueDepth(redis_url, "evalq.backfill", include_unacked=True)
    return lambda: depth() == 0


def test_backfill_killed_half_way_and_resumed_evaluates_every_line_once(
    workdir: Path,
    redis_url: str,
    store_url: str,
    store: Store,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """Kill at half, resume: only the rest is enqueued; N evaluations of N distinct snapshots."""
    path = workdir / "traces.jsonl"
    write_lines(path, LINES)
    source = str(path.resolve())
    env = {"broker_url": redis_url, "store_url": store_url, "batch_size": PER_MESSAGE}
    port = free_port()
    start_worker(**env, metrics_port=str(port))

    # Paced so the kill lands mid-file whatever the machine's speed.
    args = ["backfill", source, "--batch-size", str(BATCH), "--rate", str(LINES / 5)]
    log = (workdir / "first.log").open("wb")
    first = subprocess.Popen(
        [*EVALQ, *args, "--id", BACKFILL_ID], env=worker_env(**env), cwd=REPO, stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _kill_half_way(first, store, source)
    finally:
        first.kill()
        log.close()
    checkpoint = store.latest_checkpoint(BACKFILL_ID, source)
    assert checkpoint is not None
    done = checkpoint.position
    assert LINES // 2 <= done < LINES
    assert store.latest_checkpoint(BACKFILL_ID, COMPLETE_PREFIX + source) is None

    resumed = _evalq(env, *args[:4], "--resume", BACKFILL_ID)
    assert resumed.returncode == 0, resumed.stderr
    assert f"read {LINES}, enqueued {LINES - done}, already sent {done}," in resumed.stdout

    wait_until(lambda: store.backfill_counts(BACKFILL_ID)[0] == LINES, TIMEOUT_S, "N evaluated")
    wait_until(_drained(redis_url), TIMEOUT_S, "the backfill queue to drain")
    counts = _deliveries(port)
    assert (store.count_snapshots(), store.count_evaluations()) == (LINES, LINES)
    assert store.backfill_counts(BACKFILL_ID) == (LINES, 0)
    assert _first_time(counts) == LINES
    # Sent by the killed run after its last checkpoint, then sent again by the resume.
    resent = counts.get("duplicate", 0)
    assert 0 <= resent <= BATCH

    # Re-running the whole backfill sends all N again: the worker writes nothing new.
    rerun = _evalq(env, *args[:4], "--id", BACKFILL_ID)
    assert rerun.returncode == 0, rerun.stderr
    assert f"enqueued {LINES}, already sent 0," in rerun.stdout
    wait_until(
        lambda: _deliveries(port).get("duplicate", 0) == resent + LINES,
        TIMEOUT_S,
        "every re-sent snapshot to be seen as a duplicate",
    )
    assert (store.count_snapshots(), store.count_evaluations()) == (LINES, LINES)
    assert _first_time(_deliveries(port)) == LINES
