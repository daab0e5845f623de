"""Helpers for the queue tests: worker subprocesses, waits, snapshot variants.

Workers run as ``python -m worker`` in their own session (process group), configured only through
``EVALQ_*`` variables, with their log in the test's directory. Every process a test starts is
killed (whole group, SIGKILL) when the test ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kombu import Connection
from kombu import Producer as KombuProducer

from producer import Lane, Snapshot, read_snapshots
from producer.snapshot import LANE_QUEUES
from producer.topology import LANE_EXCHANGE, lane_queues

__all__ = [
    "EXAMPLES",
    "REPO",
    "WorkerProcess",
    "example_snapshots",
    "killed_on_exit",
    "publish_raw",
    "purge_lane_queues",
    "systemone_knobs",
    "task_headers",
    "variants",
    "wait_until",
    "worker_env",
]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "traces.jsonl"

_STARTED = re.compile(r"consumer process \d+ started")
"""The supervisor's line per consumer process it starts (restarts included)."""


def systemone_knobs(
    judge_url: str, store_url: str, broker_url: str, **extra: str
) -> dict[str, str]:
    """Worker settings for a System One judge at ``judge_url`` (thresholds 0.2 / 0.8)."""
    return {
        "broker_url": broker_url,
        "store_url": store_url,
        "judge": "systemone",
        "judge_url": judge_url,
        "judge_api_key": "test-key",
        "thresholds": "0.2,0.8",
        **extra,
    }


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    detail: Callable[[], str] | None = None,
) -> float:
    """Poll ``predicate`` every 50 ms until true; return the seconds taken, else fail (with
    ``detail()`` appended: the state that explains the wait, read only on failure)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            extra = f": {detail()}" if detail is not None else ""
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}{extra}")
        time.sleep(0.05)
    return time.monotonic() - started


class WorkerProcess:
    """One worker subprocess (default ``python -m worker``) in its own process group."""

    def __init__(self, env: dict[str, str], log_path: Path, argv: list[str] | None = None) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv or [sys.executable, "-m", "worker"],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def log(self) -> str:
        """The worker's log so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait (bounded) for Celery's ``ready.`` line of every consumer process the worker
        started (one, unsupervised); fail with the log if the worker died or never got ready.

        60 s: two workers starting beside a parallel suite on a 2-core machine at a third of its
        speed took longer than 30 s once (a CI run of 2026-12-03).
        """

        def ready() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"worker exited with {self.process.returncode}:\n{self.log[-3000:]}")
            log = self.log
            return log.count(" ready.") >= max(1, len(_STARTED.findall(log)))

        wait_until(
            ready, timeout_s, "the worker to be ready", lambda: f"its log:\n{self.log[-3000:]}"
        )

    def kill_group(self) -> None:
        """SIGKILL the worker and every process of its group (no warm shutdown)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM to the main process), then SIGKILL the group."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=15)
        self.kill_group()


def worker_env(**settings: str) -> dict[str, str]:
    """This process's environment without any ``EVALQ_*`` variable, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALQ_", "TYPESAFE_"))}
    env.update({f"EVALQ_{key.upper()}": value for key, value in settings.items()})
    return env


def example_snapshots() -> dict[str, Snapshot]:
    """The shipped examples by trace id."""
    return {s.trace_id: s for s in read_snapshots(EXAMPLES)}


def variants(base: Snapshot, count: int, prefix: str) -> list[Snapshot]:
    """``count`` snapshots with the content of ``base`` and distinct trace ids (distinct ids)."""
    wire = base.wire()
    return [Snapshot.model_validate({**wire, "trace_id": f"{prefix}-{i}"}) for i in range(count)]


_W = TypeVar("_W", bound=WorkerProcess)


@contextlib.contextmanager
def killed_on_exit(kind: type[_W]) -> Iterator[list[_W]]:
    """A list for the ``kind`` workers a fixture starts; each is SIGKILLed (its group) on exit."""
    started: list[_W] = []
    try:
        yield started
    finally:
        for proc in started:
            with contextlib.suppress(Exception):
                proc.kill_group()


def task_headers(task: str) -> dict[str, Any]:
    """Celery protocol-2 headers naming ``task`` (a fresh task id)."""
    return {"lang": "py", "task": task, "id": str(uuid.uuid4()), "retries": 0}


def publish_raw(url: str, body: bytes | str, content_type: str, headers: dict[str, Any]) -> None:
    """A message straight through kombu onto the live lane: any body, content type, headers."""
    with Connection(url) as conn:
        KombuProducer(conn).publish(
            body,
            exchange=LANE_EXCHANGE,
            routing_key=LANE_QUEUES[Lane.LIVE],
            content_type=content_type,
            content_encoding="utf-8" if isinstance(body, str) else "binary",
            headers=headers,
            serializer=None,
        )


def purge_lane_queues(amqp_url: str) -> None:
    """Empty the lane queues on the shared RabbitMQ (declaring them if needed)."""
    with Connection(amqp_url, connect_timeout=5) as conn:
        for queue in lane_queues():
            queue(conn.channel()).declare()
            queue(conn.channel()).purge()
