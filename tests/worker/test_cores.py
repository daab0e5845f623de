"""The default process count: CPU affinity capped by the cgroup CPU quota, read up the tree."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import service_missing
from worker.cores import available_cores, quota_cores

REPO = Path(__file__).resolve().parents[2]


def _v1(root: Path, proc: Path, path: str, quotas: dict[str, int]) -> None:
    """A cgroup v1 cpu hierarchy under ``root`` (``quotas``: cgroup path -> cfs quota in µs)."""
    mount = root / "cpu,cpuacct"
    for where in ["", *quotas]:
        directory = mount / where.strip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.cfs_period_us").write_text("100000\n")
        (directory / "cpu.cfs_quota_us").write_text(f"{quotas.get(where, -1)}\n")
    proc.write_text(f"4:memory:/x\n3:cpu,cpuacct:{path}\n0::/\n")


def _v2(root: Path, proc: Path, path: str, limits: dict[str, str]) -> None:
    """A cgroup v2 hierarchy at ``root`` (``limits``: cgroup path -> cpu.max text)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for where, text in limits.items():
        directory = root / where.strip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.max").write_text(text + "\n")
    proc.write_text(f"0::{path}\n")


def test_a_v1_quota_on_an_ancestor_limits_the_process_below_it(tmp_path: Path) -> None:
    """A slice's 1.5-core quota above the process's own unlimited cgroup: 2 cores."""
    proc = tmp_path / "cgroup"
    _v1(tmp_path, proc, "/slice/app", {"/slice": 150_000, "/slice/app": -1})
    assert quota_cores(tmp_path, proc) == 2


def test_the_lowest_quota_on_the_path_wins(tmp_path: Path) -> None:
    """Four cores on the slice, one on the process's cgroup: one core."""
    proc = tmp_path / "cgroup"
    _v1(tmp_path, proc, "/slice/app", {"/slice": 400_000, "/slice/app": 100_000})
    assert quota_cores(tmp_path, proc) == 1


def test_a_container_reads_its_own_mount_root_when_the_host_path_is_absent(tmp_path: Path) -> None:
    """/proc/self/cgroup names a host path the container's mount lacks: the root's quota counts."""
    proc = tmp_path / "cgroup"
    _v1(tmp_path, proc, "/docker/0123abcd", {"": 200_000})
    assert quota_cores(tmp_path, proc) == 2


def test_v2_cpu_max_with_and_without_a_limit(tmp_path: Path) -> None:
    """cgroup v2: '250000 100000' is 3 cores (rounded up); 'max 100000' is no quota."""
    proc = tmp_path / "cgroup"
    _v2(tmp_path, proc, "/app", {"/app": "250000 100000"})
    assert quota_cores(tmp_path, proc) == 3
    _v2(tmp_path, proc, "/app", {"/app": "max 100000"})
    assert quota_cores(tmp_path, proc) is None


def test_no_cgroup_or_garbage_means_no_quota(tmp_path: Path) -> None:
    """A missing /proc/self/cgroup, malformed lines or unreadable values never raise."""
    assert quota_cores(tmp_path, tmp_path / "absent") is None
    proc = tmp_path / "cgroup"
    _v1(tmp_path, proc, "/app", {"/app": 100_000})
    (tmp_path / "cpu,cpuacct" / "app" / "cpu.cfs_quota_us").write_text("lots\n")
    proc.write_text("not a cgroup line\n3:cpu,cpuacct:/app\n")
    assert quota_cores(tmp_path, proc) is None


def test_the_quota_caps_the_affinity_never_raises_it(tmp_path: Path) -> None:
    """A quota above the cores this process may run on leaves the affinity count."""
    proc = tmp_path / "cgroup"
    cores = len(os.sched_getaffinity(0))
    _v1(tmp_path, proc, "/app", {"/app": 100_000 * (cores + 8)})
    assert available_cores(tmp_path, proc) == cores
    _v1(tmp_path, proc, "/app", {"/app": 100_000})
    assert available_cores(tmp_path, proc) == 1


@contextlib.contextmanager
def _real_cgroup(quota_us: int) -> Iterator[Path]:
    """A child cgroup with a CPU quota (the v1 cpu controller, else v2), removed afterwards."""
    v1 = Path("/sys/fs/cgroup/cpu")
    mount = v1 if v1.is_dir() else Path("/sys/fs/cgroup")
    directory = mount / f"evalq-test-{os.getpid()}"
    try:
        directory.mkdir()
        if mount == v1:
            (directory / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
        else:  # v2: the cpu controller must be enabled for the children of the root
            (mount / "cgroup.subtree_control").write_text("+cpu\n")
            (directory / "cpu.max").write_text(f"{quota_us} 100000\n")
    except OSError as exc:
        with contextlib.suppress(OSError):
            directory.rmdir()
        service_missing("a writable cgroup cpu controller", f"{mount}: {exc.strerror} (as root)")
    try:
        yield directory
    finally:
        directory.rmdir()


def test_a_worker_in_a_one_core_cgroup_defaults_to_one_process() -> None:
    """A real process in a real cgroup with a 1-core quota resolves EVALQ_PROCESSES to 1."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this check needs a machine with two or more cores")
    probe = "from worker.settings import load_settings; print(load_settings().processes)"
    with _real_cgroup(quota_us=100_000) as cgroup:
        # the shell joins the cgroup, then becomes the probe: its first instruction runs there
        join = f'echo $$ > "{cgroup / "cgroup.procs"}" && exec "$0" -c "$1"'
        done = subprocess.run(
            ["/bin/sh", "-c", join, sys.executable, probe],
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if not k.startswith("EVALQ_")},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    assert done.stdout.strip() == "1"
