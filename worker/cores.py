"""How many cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

``evalq worker`` starts one consumer process per core by default. ``os.sched_getaffinity`` sees a
cpuset but not a CPU *quota*: a container limited with ``--cpus 2`` (compose ``cpus:``, a
Kubernetes CPU limit) on a 64-core host saw 64 cores and started 64 consumer processes, each with
its own memory (~180 MiB) and all sharing two cores' worth of time.

The quota is read from the process's own cgroup and every ancestor up to the controller's mount
(the lowest wins, rounded up to whole cores): cgroup v2 ``cpu.max`` (``"<quota> <period>"`` or
``"max <period>"``), cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota ``-1``: none).
Inside a container whose ``/proc/self/cgroup`` names a host path that its own mount does not
have, the mount's root (the container's cgroup) is what is read. Hand-written because the
library that does this, loky's ``cpu_count``, reads only the mount's root: a quota set on the
process's cgroup below it or on an ancestor between (a systemd slice's ``CPUQuota=``, a nested
cgroup) is not seen; ``os`` and psutil read no quota at all.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["available_cores", "quota_cores"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def available_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Cores this process may run on (affinity), capped by its cgroup CPU quota; at least 1."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    quota = quota_cores(root, proc_cgroup)
    return max(1, min(affinity, quota) if quota is not None else affinity)


def quota_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int | None:
    """The lowest CPU quota on the process's cgroup path, in whole cores (None: no quota)."""
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    limits = [limit for mount, path in _cpu_cgroups(root, lines) for limit in _quotas(mount, path)]
    return max(1, math.ceil(min(limits))) if limits else None


def _cpu_cgroups(root: Path, lines: list[str]) -> Iterator[tuple[Path, str]]:
    """(controller mount, the process's path under it) for cgroup v2 and the v1 cpu controller."""
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # v2: one hierarchy, mounted at the root or at root/unified
            for mount in (root, root / "unified"):
                if (mount / "cgroup.controllers").exists():
                    yield mount, path
                    break
        elif "cpu" in controllers.split(","):
            for name in _V1_CPU_MOUNTS:
                if (root / name / "cpu.cfs_quota_us").exists():
                    yield root / name, path
                    break


def _quotas(mount: Path, path: str) -> Iterator[float]:
    """Every quota (in cores) from the process's cgroup up to the mount's root."""
    directory = mount / path.strip("/")
    while directory != mount and not directory.is_dir():  # a host path: not in this mount
        directory = directory.parent
    while True:
        limit = _quota(directory)
        if limit is not None:
            yield limit
        if directory == mount:
            return
        directory = directory.parent


def _quota(directory: Path) -> float | None:
    """The quota of one cgroup directory in cores (None: none set, or unreadable)."""
    try:
        if (directory / "cpu.max").exists():
            quota, period = (directory / "cpu.max").read_text(encoding="utf-8").split()
        else:
            quota = (directory / "cpu.cfs_quota_us").read_text(encoding="utf-8").strip()
            period = (directory / "cpu.cfs_period_us").read_text(encoding="utf-8").strip()
        if quota in ("max", "-1"):
            return None
        cores = int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return cores if cores > 0 else None
