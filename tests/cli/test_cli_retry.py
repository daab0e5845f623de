"""Re-evaluation after a judge outage, end to end: a real worker, Redis, a stand-in judge on
127.0.0.1 that fails every request and then recovers, ``evalq retry`` and the automatic policy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from producer import Producer, Snapshot
from tests.cli.cli_kit import evalq
from tests.queue.queue_kit import (
    WorkerProcess,
    example_snapshots,
    systemone_knobs,
    variants,
    wait_until,
)
from worker.judges.testing import serve_in_thread, status
from worker.store import Store, StoredEvaluation, attempt_of, open_store

VERSION_TIMEOUT_S = 60.0


def _snapshots(count: int, prefix: str) -> list[Snapshot]:
    """``count`` complete traces that each ask the judge once (all metrics in one request)."""
    return variants(example_snapshots()["store-hours-grounded"], count, prefix)


def _send(broker_url: str, snapshots: list[Snapshot]) -> list[str]:
    with Producer(broker_url) as producer:
        return producer.enqueue_many(snapshots)


def _newest(store: Store, snapshot_id: str) -> StoredEvaluation | None:
    """The newest attempt of the snapshot under whichever version the worker recorded."""
    first = next((e for e in store.snapshot_evaluations(snapshot_id) if e.run == ""), None)
    if first is None:
        return None
    return store.newest_evaluation(snapshot_id, first.metric_set_version)


def _attempts(store: Store, ids: list[str]) -> list[int | None]:
    newest = [_newest(store, i) for i in ids]
    return [None if n is None else attempt_of(n.record.run) for n in newest]


def _reasons(stored: StoredEvaluation) -> dict[str, str]:
    return {r.metric_id: r.reason for r in stored.record.results}


def test_evalq_retry_yields_one_linked_evaluation_per_snapshot(
    redis_url: str, store_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    """401s then recovery: one attempt each, linked to its unchanged failure; a rerun: nothing."""
    with serve_in_thread() as judge, open_store(store_url) as store:
        snapshots = _snapshots(4, "outage")
        judge.script(*[status(401)] * len(snapshots))  # 401 is never retried: one per snapshot
        knobs = systemone_knobs(judge.base_url, store_url, redis_url, processes="1")
        start_worker(**knobs)
        ids = _send(redis_url, snapshots)
        wait_until(lambda: all(_attempts(store, ids)), VERSION_TIMEOUT_S, "the failed attempts")
        failed = {i: _newest(store, i) for i in ids}
        assert judge.count == len(snapshots)
        for stored in failed.values():
            assert stored is not None
            assert _reasons(stored)["grounded"] == "BACKEND_ERROR"

        retried = evalq("retry", settings=knobs)
        assert retried.returncode == 0, retried.stderr
        assert "newest evaluations with BACKEND_ERROR or TIMEOUT: 4" in retried.stdout
        assert "re-enqueued as their next attempt: 4 (backfill lane)" in retried.stdout

        wait_until(lambda: _attempts(store, ids) == [2] * 4, VERSION_TIMEOUT_S, "attempt 2")
        for snapshot_id, before in failed.items():
            assert before is not None
            after = _newest(store, snapshot_id)
            assert after is not None
            assert after.record.run == "attempt:2"
            assert after.previous_evaluation_id == before.evaluation_id
            assert after.record.lane == "backfill"
            assert _reasons(after)["grounded"] == "ALL_CLAIMS_REQUIRED"
            assert store.get_evaluation(before.evaluation_id) == before  # never changed
        assert store.count_evaluations() == 8
        assert judge.count == 8

        again = evalq("retry", settings=knobs)
        assert again.returncode == 0, again.stderr
        assert "nothing to retry" in again.stdout
        assert store.count_evaluations() == 8
        _assert_report_counts_each_snapshot_once(knobs, len(snapshots))


def _assert_report_counts_each_snapshot_once(knobs: dict[str, str], count: int) -> None:
    """The report counts each snapshot once, with its newest (recovered) results."""
    report = json.loads(evalq("report", "--json", settings=knobs).stdout)
    assert report["snapshots"] == report["evaluations"] == count
    assert report["superseded_evaluations"] == count
    grounded = report["metrics"]["grounded"]
    assert grounded["total"] == count
    assert grounded["by_reason"] == {"ALL_CLAIMS_REQUIRED": count}  # no BACKEND_ERROR left


def test_evalq_retry_counts_purged_content_as_not_retryable(
    redis_url: str, store_url: str, start_worker: Callable[..., WorkerProcess], workdir: Path
) -> None:
    """A failed snapshot whose content was purged is reported CONTENT_NOT_KEPT, not sent."""
    with serve_in_thread() as judge, open_store(store_url) as store:
        snapshots = _snapshots(2, "purged")
        judge.script(*[status(401)] * len(snapshots))
        knobs = systemone_knobs(judge.base_url, store_url, redis_url, processes="1")
        worker = start_worker(**knobs)
        ids = _send(redis_url, snapshots)
        wait_until(lambda: all(_attempts(store, ids)), VERSION_TIMEOUT_S, "the failed attempts")
        worker.stop()
        now = datetime.now(UTC).isoformat()
        purged = evalq("purge", "--content-before", now, settings=knobs, cwd=workdir)
        assert purged.returncode == 0, purged.stderr
        result = evalq("retry", settings=knobs)
        assert result.returncode == 0, result.stderr
        assert "re-enqueued as their next attempt: 0" in result.stdout
        assert "not retryable: 2" in result.stdout
        assert result.stderr.count("CONTENT_NOT_KEPT") == 2


def test_the_automatic_policy_backs_off_and_stops_at_max_attempts(
    redis_url: str, store_url: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    """[retry] max_attempts = 3, backoff_s = 1: attempts 1 s then 2 s apart, chained, no fourth."""
    # The judge recovers on the last request: one snapshot ends decided, the other failed.
    with serve_in_thread() as judge, open_store(store_url) as store:
        snapshots = _snapshots(2, "auto")
        judge.script(*[status(401)] * 5)  # attempts 1, 2 fail for both; attempt 3 for one
        knobs = systemone_knobs(
            judge.base_url,
            store_url,
            redis_url,
            processes="2",  # the pass runs in the supervisor only: one pass, not one per child
            retry_max_attempts="3",
            retry_backoff_s="1",
        )
        start_worker(**knobs)
        ids = _send(redis_url, snapshots)
        wait_until(lambda: _attempts(store, ids) == [3, 3], VERSION_TIMEOUT_S, "attempt 3")
        wait_until(lambda: judge.count >= 6, 10.0, "the last judge request")
        for snapshot_id in ids:
            chain = store.snapshot_evaluations(snapshot_id)
            assert [e.run for e in chain] == ["", "attempt:2", "attempt:3"]
            stored = [store.get_evaluation(e.evaluation_id) for e in chain]
            assert all(s is not None for s in stored)
            first, second, third = (s for s in stored if s is not None)
            assert second.previous_evaluation_id == first.evaluation_id
            assert third.previous_evaluation_id == second.evaluation_id
            assert (second.created_at - first.created_at).total_seconds() >= 1.0
            assert (third.created_at - second.created_at).total_seconds() >= 2.0
        newest = [_newest(store, i) for i in ids]
        grounded = sorted(_reasons(n)["grounded"] for n in newest if n is not None)
        assert grounded == ["ALL_CLAIMS_REQUIRED", "BACKEND_ERROR"]
        time.sleep(5.0)  # more than the next back-off (4 s): still no attempt 4
        assert judge.count == 6
        assert store.count_evaluations() == 6
