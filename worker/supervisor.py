"""A multi-process worker: one independent consumer process per core, supervised.

A worker process holds one GIL; evaluation is CPU work between judge calls, so one process uses
at most one core. ``evalq worker`` therefore starts ``processes`` children (default: one per
core), each a complete single-process worker (``python -m worker``: its own event loop, broker
connection, prefetch and acks, store connection, Celery node name ``evalq-<pid>.<i>@host``) with
an even share of ``concurrency``.

A worker that serves the live lane beside other lanes (the default ``live,backfill,outcomes``)
starts two groups of ``processes`` children: one serving the live lane alone, one the others
(``Settings.lane_groups``), each group with its own even shares of ``concurrency``. A live snapshot
then never waits behind a saturating backfill inside one process: not for the consumer thread
that fetches (measured beside a saturating backfill: hand-over 50 ms at P50 and 116 ms at P95
when both lanes shared a process, 6 ms and 25 ms in a process of its own), not for the loop,
not for the GIL; and the other group runs at a lower CPU priority (:data:`BESIDE_LIVE_NICE`)
with its evaluations in flight following the judge's round trip (:mod:`worker.in_flight_limit`:
a backfill's requests queued at the judge delay the live ones queued behind them).
A group of one lane (``--lanes live`` or ``--lanes backfill``) is one group.

The supervisor:

- restarts a child that dies (killed, crashed, halted on a store fault: exit status 75) — its
  unacked messages come back from the broker and the store's idempotency records each exactly
  once — after a back-off that doubles with every recent restart (:data:`RESTART_BACKOFF_S` up
  to :data:`RESTART_BACKOFF_MAX_S`); more than :data:`MAX_RESTARTS` restarts within
  :data:`RESTART_WINDOW_S` stop the worker (exit 1) instead of looping;
- stops everything when a child exits with status 2 (invalid configuration): exit 2;
- forwards SIGTERM/SIGINT/SIGQUIT to every child (warm shutdown: running evaluations finish,
  the rest is requeued) and exits when they have, killing any still running after
  ``shutdown_drain_s`` plus a grace period;
- is watched by its children: a SIGKILLed supervisor's children shut down warm on their own;
- serves ``/metrics`` for all children when ``EVALQ_METRICS_PORT`` is set (prometheus_client's
  multiprocess mode in a private directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from types import FrameType

from producer.topology import Lane
from worker import metrics
from worker.halt import EXIT_HALTED
from worker.lifecycle import PARENT_ENV
from worker.runtime import BESIDE_LIVE_ENV
from worker.settings import Settings

__all__ = [
    "BESIDE_LIVE_NICE",
    "MAX_RESTARTS",
    "RESTART_BACKOFF_MAX_S",
    "RESTART_BACKOFF_S",
    "RESTART_WINDOW_S",
    "Supervisor",
    "plan",
    "restart_delay_s",
    "shares",
]

_log = logging.getLogger(__name__)
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
RESTART_BACKOFF_S = 0.5
"""Wait before the first restart of a burst; doubled for each further restart in the window."""
RESTART_BACKOFF_MAX_S = 15.0
BESIDE_LIVE_NICE = 10
"""CPU niceness of the non-live consumer processes of a worker that serves live too: when the
machine is saturated the kernel gives the live processes (and the judge or Redis, if they share
the machine) the CPU first. Measured beside a saturating backfill: live P95 submit → recorded
318 ms at nice 0, 240-269 ms at 10 (docs/concurrency.md, "Eighth round")."""
_POLL_S = 0.2
_GRACE_S = 30.0
_CONFIG_EXIT = 2


def restart_delay_s(recent: int) -> float:
    """The back-off before a restart that is the ``recent``-th (1-based) in the window."""
    return float(min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2 ** max(0, recent - 1)))


def _status(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code}"
    if code == EXIT_HALTED:
        return f"status {code}: halted on a store fault, see its log"
    return f"status {code}"


def shares(concurrency: int, processes: int) -> list[int]:
    """``concurrency`` split as evenly as possible over ``processes`` (each at least one)."""
    count = max(1, min(processes, concurrency))
    base, extra = divmod(concurrency, count)
    return [base + (1 if index < extra else 0) for index in range(count)]


@dataclass(frozen=True)
class _Plan:
    """What one consumer process serves: its lanes, its share of the concurrency, its nice."""

    lanes: tuple[Lane, ...]
    share: int
    nice: int
    beside_live: bool = False

    @property
    def lane_names(self) -> str:
        """``EVALQ_LANES`` of the process."""
        return ",".join(lane.value for lane in self.lanes)


def plan(settings: Settings) -> list[_Plan]:
    """Every consumer process of the worker: each of ``settings.lane_groups`` split over
    ``processes``; beside a live group, the other group runs at least at
    :data:`BESIDE_LIVE_NICE`."""
    split = len(settings.lane_groups) > 1
    return [
        _Plan(lanes, share, max(settings.nice, BESIDE_LIVE_NICE), beside_live=True)
        if split and Lane.LIVE not in lanes
        else _Plan(lanes, share, settings.nice)
        for lanes in settings.lane_groups
        for share in shares(settings.concurrency, settings.processes)
    ]


@dataclass
class _Child:
    index: int
    plan: _Plan
    process: subprocess.Popen[bytes]


@dataclass
class Supervisor:
    """Start, watch and stop the consumer processes of one ``evalq worker``."""

    settings: Settings
    hostname: str | None = None
    children: dict[int, _Child] = field(default_factory=dict)
    _stopping: bool = False
    _restarts: deque[float] = field(default_factory=deque)
    _due: dict[int, float] = field(default_factory=dict)  # child index -> restart time
    _metrics_dir: tempfile.TemporaryDirectory[str] | None = None

    def run(self) -> int:
        """Serve until stopped; the worker's exit status."""
        self._install_signals()
        exporter = self._serve_metrics()
        try:
            for index, child_plan in enumerate(plan(self.settings)):
                self._start(index, child_plan)
            return self._watch()
        finally:
            self._stop_all()
            if exporter is not None:
                exporter.stop()
            if self._metrics_dir is not None:
                self._metrics_dir.cleanup()

    # -- children -------------------------------------------------------------------------------

    def _env(self, child: _Plan) -> dict[str, str]:
        """The child's environment: this one, plus what ``evalq worker``'s flags changed."""
        env = dict(os.environ)
        env.update(
            EVALQ_PROCESSES="1",
            EVALQ_CONCURRENCY=str(child.share),
            EVALQ_LANES=child.lane_names,
            EVALQ_LOG_LEVEL=self.settings.log_level,
            EVALQ_NICE=str(child.nice),
            **{PARENT_ENV: str(os.getpid()), BESIDE_LIVE_ENV: "1" if child.beside_live else "0"},
        )
        if self.settings.config is not None:  # `evalq worker --config FILE`
            env["EVALQ_CONFIG"] = str(self.settings.config.resolve())
        return env

    def _node(self, index: int) -> str:
        base = self.hostname or f"evalq-{os.getpid()}@%h"
        name, _, host = base.partition("@")
        return f"{name}.{index}@{host or '%h'}"

    def _start(self, index: int, child: _Plan) -> None:
        argv = [sys.executable, "-m", "worker", "--hostname", self._node(index)]
        process = subprocess.Popen(argv, env=self._env(child))  # noqa: S603 - our own module
        self.children[index] = _Child(index, child, process)
        _log.info(
            "consumer process %d started (pid %d, %d slots, lanes %s)",
            index,
            process.pid,
            child.share,
            child.lane_names,
        )

    def _watch(self) -> int:
        while not self._stopping:
            time.sleep(_POLL_S)
            self._start_due()
            for child in list(self.children.values()):
                if child.index in self._due:
                    continue
                code = child.process.poll()
                if code is None or self._stopping:
                    continue
                metrics.mark_process_dead(child.process.pid)
                verdict = self._on_exit(child, code)
                if verdict is not None:
                    return verdict
        return 0

    def _start_due(self) -> None:
        # A restart waits its back-off here, not in a sleep: the other children and the
        # signals are watched meanwhile (stamina's retries block, so they do not fit here).
        now = time.monotonic()
        for index, due in list(self._due.items()):
            if due <= now and not self._stopping:
                del self._due[index]
                self._start(index, self.children[index].plan)

    def _on_exit(self, child: _Child, code: int) -> int | None:
        """Restart an unexpected exit after a back-off; the worker's status if it must stop."""
        if code == _CONFIG_EXIT:
            _log.error("consumer process %d: invalid configuration; stopping", child.index)
            return _CONFIG_EXIT
        now = time.monotonic()
        self._restarts.append(now)
        while self._restarts and now - self._restarts[0] > RESTART_WINDOW_S:
            self._restarts.popleft()
        if len(self._restarts) > MAX_RESTARTS:
            _log.error(
                "consumer process %d exited (%s); %d exits in %.0f s: giving up, stopping",
                child.index,
                _status(code),
                len(self._restarts),
                RESTART_WINDOW_S,
            )
            return 1
        delay_s = restart_delay_s(len(self._restarts))
        _log.warning(
            "consumer process %d exited (%s); restarting in %.1f s",
            child.index,
            _status(code),
            delay_s,
        )
        self._due[child.index] = now + delay_s
        return None

    def _stop_all(self) -> None:
        self._stopping = True
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.shutdown_drain_s + _GRACE_S
        for child in self.children.values():
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()

    # -- signals and metrics --------------------------------------------------------------------

    def _install_signals(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del frame
        _log.info("signal %d: stopping the consumer processes", signum)
        self._stopping = True

    def _serve_metrics(self) -> metrics.Exporter | None:
        port = self.settings.metrics_port
        if port is None:
            return None
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self._metrics_dir = tempfile.TemporaryDirectory(prefix="evalq-metrics-")
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = self._metrics_dir.name
        return metrics.start_exporter(port, addr=self.settings.metrics_addr)
