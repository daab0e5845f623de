"""Running ``evalq`` as a user does: a subprocess with only the ``EVALQ_*`` variables given."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.queue.queue_kit import REPO, worker_env

__all__ = ["EVALQ", "evalq", "evalq_command"]

EVALQ = Path(sys.executable).with_name("evalq")
"""The installed console script (``python -m worker.cli`` when it is not installed)."""


def evalq_command() -> list[str]:
    """The argv prefix that runs ``evalq``."""
    return [str(EVALQ)] if EVALQ.exists() else [sys.executable, "-m", "worker.cli"]


def evalq(
    *args: str,
    cwd: Path = REPO,
    timeout_s: float = 120.0,
    settings: Mapping[str, str] | None = None,
    **more: str,
) -> subprocess.CompletedProcess[str]:
    """``evalq ARGS`` in ``cwd`` with ``EVALQ_<KEY>=value`` per setting; any exit status."""
    return subprocess.run(
        [*evalq_command(), *args],
        cwd=cwd,
        env=worker_env(**{**(settings or {}), **more}),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
