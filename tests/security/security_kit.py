"""Helpers shared by the security tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["cli_output"]


def cli_output(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run ``evalq ARGS`` in a subprocess; its stdout + stderr (exit 0, or 3: a status breach)."""
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr[-2000:]
    return done.stdout + done.stderr
