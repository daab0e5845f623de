"""A runtime beside the live lane yields: idle CPU class (store threads apart), adaptive limit.

Scheduling classes are per thread of a whole process, so each case runs in a child process of
its own (the test process keeps its own class).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from worker.runtime import BESIDE_LIVE_ENV

_CHILD = """
import json, os, threading
from worker.judges import SyntheticJudge
from worker.runtime import Runtime
from worker.settings import load_settings
settings = load_settings(concurrency=64, processes=1, store_url={store!r})
rt = Runtime(settings, judge=SyntheticJudge())
try:
    policies = {{}}
    for thread in threading.enumerate():
        if thread.native_id is not None:
            policies.setdefault(thread.name.split("_")[0], set()).add(
                os.sched_getscheduler(thread.native_id)
            )
    limit = rt.in_flight_limit
    print(json.dumps({{
        "policies": {{name: sorted(found) for name, found in policies.items()}},
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "limit": None if limit is None else [limit.floor, limit.ceiling],
    }}))
finally:
    rt.close()
"""


def _runtime_in_child(workdir: Path, beside_live: str) -> dict[str, object]:
    env = {**os.environ, BESIDE_LIVE_ENV: beside_live, "EVALQ_NICE": "10"}
    code = _CHILD.format(store=f"sqlite:///{workdir / 'evalq.db'}")
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_runtime_beside_live_runs_idle_but_its_store_threads_and_adapts(workdir: Path) -> None:
    """Beside live: loop and main thread SCHED_IDLE, store threads normal, nice 10, limit 16-64."""
    found = _runtime_in_child(workdir, "1")
    policies = found["policies"]
    assert isinstance(policies, dict)
    assert policies["evalq-loop"] == [os.SCHED_IDLE]
    assert policies["MainThread"] == [os.SCHED_IDLE]
    assert policies["evalq-store"] == [os.SCHED_OTHER]
    assert found["nice"] == 10
    assert found["limit"] == [16, 64]


def test_a_runtime_on_its_own_keeps_the_normal_class_and_a_fixed_count(workdir: Path) -> None:
    """Without the supervisor's mark: every thread normal (nice only), no adaptive limit."""
    found = _runtime_in_child(workdir, "0")
    policies = found["policies"]
    assert isinstance(policies, dict)
    assert set(map(tuple, policies.values())) == {(os.SCHED_OTHER,)}
    assert found["nice"] == 10
    assert found["limit"] is None
