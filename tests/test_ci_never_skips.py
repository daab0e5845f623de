"""Under CI a missing service fails its tests, and any skip fails the whole run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_PROBE = """
import pytest
from tests.conftest import service_missing

def test_missing_service():
    service_missing("nothing-here", "a probe of the rule")

def test_plain_skip():
    pytest.skip("a plain skip")
"""


def _run(tmp_path: Path, ci: str | None, *select: str) -> subprocess.CompletedProcess[str]:
    """pytest with this suite's conftest as a plugin on a probe file; CI as given."""
    (tmp_path / "test_probe.py").write_text(_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    argv = ["-q", "-p", "no:cacheprovider", "-p", "tests.conftest", "-n", "0", "-c", os.devnull]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *argv, "--rootdir", str(tmp_path), *select],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_under_ci_a_missing_service_fails_and_names_itself(tmp_path: Path) -> None:
    """CI=true: service_missing fails the test with the service's name, never skips it."""
    done = _run(tmp_path, "true", str(tmp_path / "test_probe.py"), "-k", "missing")
    assert done.returncode == 1, done.stdout
    assert "nothing-here is not reachable" in done.stdout
    assert "1 failed" in done.stdout


def test_under_ci_any_skip_fails_the_run(tmp_path: Path) -> None:
    """CI=true: a test that skips for any reason makes the run fail, naming it."""
    done = _run(tmp_path, "true", str(tmp_path / "test_probe.py"), "-k", "plain")
    assert done.returncode == 1, done.stdout
    assert "CI: 1 test(s) skipped, which fails the run" in done.stdout


def test_a_developer_machine_is_told_what_is_missing(tmp_path: Path) -> None:
    """Without CI the same probe skips, saying which service is missing (exit 0)."""
    done = _run(tmp_path, None, str(tmp_path / "test_probe.py"), "-rs")
    assert done.returncode == 0, done.stdout
    assert "nothing-here is not reachable: a probe of the rule" in done.stdout
