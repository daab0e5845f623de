"""Which CPU each consumer process of a worker runs on: one CPU each, when they fit.

A consumer process is several threads taking turns at one GIL (the Celery consumer thread, the
event loop, two store threads): every blocking call hands the GIL to another thread, which the
kernel must wake. Left to float, those threads wake each other across CPUs (an inter-processor
interrupt, on a virtual machine an exit to the hypervisor) and the loop thread, the busy one,
waited in a run queue about as long as it ran (``/proc/<pid>/task/*/schedstat`` in an X0 drain:
0.45 s waiting per 0.45 s running). With each process's threads on one CPU the hand-over is a
same-CPU switch: X0 drains read +13% and +35% in two alternating same-drain comparisons on the
2-core machine (docs/concurrency.md, "Eleventh round").

:func:`plan_cpus` gives each process of a lane group its own CPU of those this worker may use
(``os.sched_getaffinity``), in order; a live group and the group beside it map alike, so live
process *i* and backfill process *i* share CPU *i* (the backfill one yields to it: idle class).
When a group has more processes than CPUs, nothing is pinned (the scheduler balances an
oversubscribed machine better than a fixed map). ``EVALQ_CPU_AFFINITY=off`` turns it off, for
machines where the worker shares its CPUs with other busy programs.

The supervisor passes each child its CPU in :data:`CPU_ENV`; the child pins itself first thing
(:func:`pin_from_env`), before it starts a thread, so every thread it starts inherits the CPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

__all__ = ["CPU_ENV", "allowed_cpus", "pin_from_env", "plan_cpus"]

CPU_ENV = "EVALQ_CPU"
"""Internal: the CPU a consumer process pins itself to (set by the supervisor)."""


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order (all of ``os.cpu_count()`` where unknown)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        return list(range(os.cpu_count() or 1))
    return sorted(getaffinity(0))


def plan_cpus(processes: int, cpus: Sequence[int], *, enabled: bool) -> list[int | None]:
    """The CPU of each of ``processes`` processes of one group (``None``: not pinned)."""
    if not enabled or processes > len(cpus) or len(cpus) < 2:
        return [None] * processes
    return [cpus[index] for index in range(processes)]


def pin_from_env() -> None:
    """Pin this process to the CPU in :data:`CPU_ENV`, if any (before any thread starts)."""
    value = os.environ.get(CPU_ENV, "")
    setaffinity = getattr(os, "sched_setaffinity", None)
    if not value.isdigit() or setaffinity is None:
        return
    with contextlib.suppress(OSError):  # a CPU taken away since the plan: run unpinned
        setaffinity(0, {int(value)})
