"""A consumer process pins itself to the CPU its supervisor chose, before any thread starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from worker.cpu_affinity import CPU_ENV, allowed_cpus, plan_cpus

_SHOW = (
    "import os, threading\n"
    "from worker.cpu_affinity import pin_from_env\n"
    "pin_from_env()\n"
    "seen = []\n"
    "t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))\n"
    "t.start(); t.join()\n"
    "print(sorted(os.sched_getaffinity(0)), seen[0])\n"
)


def _run(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != CPU_ENV}
    if env_value is not None:
        env[CPU_ENV] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_child_given_a_cpu_runs_there_and_so_do_its_threads() -> None:
    """EVALQ_CPU=<last allowed CPU>: the process and a thread it starts run on that CPU only."""
    cpu = allowed_cpus()[-1]
    assert _run(str(cpu)) == f"[{cpu}] [{cpu}]"


def test_a_child_without_a_cpu_keeps_every_allowed_cpu() -> None:
    """No EVALQ_CPU (or a value that is not a CPU number): nothing changes."""
    everything = str(allowed_cpus())
    assert _run(None) == f"{everything} {everything}"
    assert _run("any") == f"{everything} {everything}"


def test_a_cpu_taken_away_leaves_the_process_unpinned() -> None:
    """A CPU outside the allowed set (gone since the plan) is ignored, not an error."""
    everything = str(allowed_cpus())
    assert _run(str(max(allowed_cpus()) + 4096)) == f"{everything} {everything}"


@pytest.mark.parametrize(
    ("processes", "cpus", "expected"),
    [
        (2, [0, 1], [0, 1]),
        (2, [2, 3, 7], [2, 3]),
        (3, [0, 1], [None, None, None]),
        (1, [4], [None]),
    ],
)
def test_each_process_gets_the_next_allowed_cpu_when_they_fit(
    processes: int, cpus: list[int], expected: list[int | None]
) -> None:
    """Process i takes allowed CPU i; more processes than CPUs, or one CPU, pins nothing."""
    assert plan_cpus(processes, cpus, enabled=True) == expected
    assert plan_cpus(processes, cpus, enabled=False) == [None] * processes
