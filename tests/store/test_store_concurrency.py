"""Concurrent writers: threads (both databases) and processes (SQLite) converge on one record."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from tests.conftest import backend_url
from tests.store._store_helpers import evaluation_record, outcome_record, snapshot_record
from worker.store import OutcomeWritten, Store, Written, open_store
from worker.store._backends import PostgresBackend

T = TypeVar("T")
THREADS = 8


def _together(calls: list[Callable[[], T]]) -> list[T]:
    """Run the calls on their own threads, released at the same moment by a barrier."""
    barrier = threading.Barrier(len(calls), timeout=30)

    def run(call: Callable[[], T]) -> T:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls, timeout=60))


def test_threads_writing_one_evaluation_create_one_row(store: Store) -> None:
    """Eight threads deliver the same evaluation at once: one creates it, the rest find it."""
    snapshot = snapshot_record("t-threads")
    record = evaluation_record(snapshot.snapshot_id)
    writes: list[Written] = _together([lambda: store.record_evaluation(record, snapshot)] * THREADS)
    assert sorted(w.created for w in writes) == [False] * (THREADS - 1) + [True]
    assert {w.id for w in writes} == {record.evaluation_id}
    assert (store.count_snapshots(), store.count_evaluations()) == (1, 1)
    assert sum(1 for _ in store.iter_results()) == len(record.results)


def test_outcome_racing_its_evaluation_is_always_linked(store: Store) -> None:
    """An outcome and its evaluation committed at the same moment are linked exactly once."""
    missing = []
    for i in range(10):
        trace = f"t-race-{i}"
        snapshot = snapshot_record(trace)
        store.put_snapshot(snapshot)
        record = evaluation_record(snapshot.snapshot_id)
        outcome = outcome_record(f"o-race-{i}", trace)
        calls: list[Callable[[], Written | OutcomeWritten]] = [
            partial(store.record_evaluation, record),
            partial(store.record_outcome, outcome),
        ]
        _together(calls)
        links = store.links_for_evaluation(record.evaluation_id)
        if [link.outcome.event_id for link in links] != [outcome.event_id]:
            missing.append(trace)
    assert missing == []


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[2])
from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.store import open_store

store = open_store(sys.argv[1])
snapshot = snapshot_record("t-processes")
records = [evaluation_record(snapshot.snapshot_id, version=f"v{i}") for i in range(20)]
print("ready", flush=True)
sys.stdin.readline()
created = [store.record_evaluation(r, snapshot).created for r in records]
store.close()
print(json.dumps(created), flush=True)
"""


def test_two_processes_writing_the_same_evaluations_sqlite(tmp_path: Path) -> None:
    """Two processes write the same 20 evaluations into one SQLite file: each exists once."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    helpers = str(Path(__file__).parents[2])  # the repo root, so `tests.store` imports
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, helpers],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
    assert [child.returncode for child in children] == [0, 0]
    flags = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    per_version = [a + b for a, b in zip(*flags, strict=True)]
    assert per_version == [1] * 20, "each evaluation created by exactly one process"
    with open_store(url) as store:
        assert (store.count_snapshots(), store.count_evaluations()) == (1, 20)


@pytest.mark.services
def test_postgres_lock_holds_every_key_until_commit(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """One pipelined lock call takes every trace key it is given and holds each to the end."""
    keys = [f"evalq.trace\x1ft-{i}" for i in range(5)]
    probe = "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))"
    with backend_url("postgresql", request, tmp_path, "locks") as url:
        backend = PostgresBackend(url, pool_max_size=1, connect_timeout_s=5, lock_timeout_s=5)
        try:
            with backend.transaction(write=True) as tx, psycopg.connect(url) as other:
                tx.lock(*keys)
                held = [other.execute(probe, (key,)).fetchone() for key in keys]
                other.rollback()
            with psycopg.connect(url) as other:
                free = [other.execute(probe, (key,)).fetchone() for key in keys]
        finally:
            backend.close()
    assert held == [(False,)] * len(keys)
    assert free == [(True,)] * len(keys)
