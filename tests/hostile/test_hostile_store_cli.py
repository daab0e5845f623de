"""An unreachable store: every command prints one line naming EVALQ_STORE_URL and exits 2, fast.

Real processes (``python -m worker.cli``) against a closed port on 127.0.0.1, a port that
accepts TCP but never answers (the connect timeout must end it), and a SQLite path that cannot
be created. Before: a traceback (exit 1) after ~31 s of pool and store retries.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.queue.queue_kit import REPO, worker_env
from worker.embedded import free_port

EVALQ = [sys.executable, "-m", "worker.cli"]
STARTUP_S = 6.0  # interpreter + imports on a loaded 2-core machine
EXAMPLE = next((REPO / "examples").glob("*.jsonl"))


def _evalq(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [*EVALQ, *args],
        env=worker_env(**env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, time.monotonic() - started


COMMANDS = [
    ("status",),
    ("status", "--json", "--max-depth", "0"),
    ("report",),
    ("report", "--json"),
    ("redrive",),
    ("purge", "--content-before", "30d"),
    ("store", "migrate"),
    ("run", str(EXAMPLE)),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: "-".join(a[:2]).replace("/", "_"))
def test_closed_postgresql_port_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    """A refused PostgreSQL connection: exit 2, one stderr line, no traceback, in seconds."""
    url = f"postgresql://evalq:hunter2@127.0.0.1:{free_port()}/evalq"
    env = {"store_url": url, "broker_url": f"redis://127.0.0.1:{free_port()}/0"}
    done, elapsed_s = _evalq(env, *args)
    assert done.returncode == 2, done.stderr
    location = url.replace(":hunter2", "")
    assert done.stderr.splitlines() == [
        f"EVALQ_STORE_URL: {location} is unreachable (STORE_UNAVAILABLE)"
    ]
    assert "Traceback" not in done.stdout + done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    assert elapsed_s < STARTUP_S


def test_worker_with_closed_postgresql_port_exits_2_in_one_line() -> None:
    """``evalq worker`` checks the store first: one line naming EVALQ_STORE_URL, exit 2."""
    url = f"postgresql://evalq@127.0.0.1:{free_port()}/evalq"
    env = {"store_url": url, "broker_url": f"redis://127.0.0.1:{free_port()}/0"}
    done, elapsed_s = _evalq(env, "worker")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"EVALQ_STORE_URL: {url} is unreachable (STORE_UNAVAILABLE)" in done.stderr
    assert elapsed_s < STARTUP_S


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that completes TCP handshakes (backlog) but never says a word."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


def test_silent_postgresql_server_ends_at_the_connect_timeout(silent_port: int) -> None:
    """A server that never answers: exit 2 after the 3 s connect timeout, not ~31 s of retries."""
    url = f"postgresql://evalq@127.0.0.1:{silent_port}/evalq"
    done, elapsed_s = _evalq({"store_url": url}, "report")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"EVALQ_STORE_URL: {url} is unreachable (STORE_UNAVAILABLE)"
    ]
    assert 2.5 <= elapsed_s < 3.0 + STARTUP_S


def test_sqlite_path_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    """A SQLite file under a regular file (no directory possible): exit 2, one line."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    path = blocker / "evalq.db"
    done, _ = _evalq({"store_url": f"sqlite:///{path}"}, "status")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"EVALQ_STORE_URL: {path} is unreachable (STORE_UNAVAILABLE)"
    ]
