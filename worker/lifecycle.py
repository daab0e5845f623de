"""Process setup and teardown of a worker: one Celery consumer bootstep, added by ``create_app``.

:class:`Lifecycle` is created with the consumer (before it connects) and:

- builds this process's runtime (loop, judge, store; a broken store or judge configuration
  shows at start, not on the first message), tunes the cycle collector, installs log redaction;
- builds the handler and the :class:`~worker.consumer.Intake` the consumer hands messages to;
  when the live lane shares the process with other lanes, a second runtime serves it alone
  (:class:`~worker.consumer.Intakes`: live snapshots never wait behind a backfill's loop);
- serves ``/metrics`` when ``EVALQ_METRICS_PORT`` is set and this process is the whole worker (a
  multi-process worker's supervisor serves its children's metrics instead);
- with ``EVALQ_OTLP_ENDPOINT`` set, builds the process's evaluation-event exporter
  (:mod:`worker.otel_export`), shared by its handlers; at shutdown it sends what is queued
  (bounded) after the runtimes closed;
- in a child of a multi-process worker, watches its parent: if the supervisor dies, the child
  shuts down warm (its running evaluations finish, its other held messages go back to the
  broker);
- on warm shutdown (``close``, before anything else stops), starts no more evaluations: those
  running finish and are recorded, and every message with an evaluation that had not started
  goes back to the broker; it waits up to ``Settings.shutdown_drain_s`` (one evaluation and
  its write) for every message to be acked or returned (not after a halt: their writes would
  fail; they stay unacked and the broker restores them); on ``shutdown`` closes the runtime;
- turns a halt (:mod:`worker.halt`: a store fault past its bound, a replaced SQLite file, a
  loop thread gone; one per process, shared by its runtimes) into Celery's warm shutdown with
  the halt's exit status;
- if the process cannot be set up, logs one line (the reason, never exception text) and ends
  the process non-zero: ``2`` for invalid configuration, :data:`~worker.halt.EXIT_HALTED` for a
  store that cannot be opened, :data:`~worker.halt.EXIT_CRASHED` for anything else.

Nothing here is a process-global signal handler: building an app has no side effects.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from celery import bootsteps
from celery.worker import state as celery_state

from worker import broker, metrics, runtime
from worker.consumer import Intake, Intakes
from worker.halt import EXIT_CRASHED, EXIT_HALTED, Halt
from worker.handling import Handler
from worker.log_redaction import install_redaction
from worker.otel_events import EventSink
from worker.otel_export import ResultExporter
from worker.settings import ConfigError, Settings
from worker.store import StoreError

__all__ = ["PARENT_ENV", "Lifecycle"]

_log = logging.getLogger(__name__)
PARENT_ENV = "EVALQ_SUPERVISOR_PID"
"""Set by the supervisor in each child's environment: the pid the child watches."""
_PARENT_CHECK_S = 0.5
_CONFIG_EXIT = 2


class Lifecycle(bootsteps.StartStopStep):
    """The evalq consumer bootstep (see the module docstring)."""

    label = "evalq"
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.exporter: metrics.Exporter | None = None
        self.live_runtime: runtime.Runtime | None = None
        self.runtime: runtime.Runtime | None = None
        self.halt: Halt | None = None
        self.events: ResultExporter | None = None

    def create(self, c: Any) -> None:
        """Build the runtime, handler and intake of this process (before the consumer connects)."""
        self._renewals: Any = None
        try:
            self._create(c)
        except ConfigError as exc:  # names the variable, never its value
            _log.critical("worker cannot start: invalid configuration: %s", exc)
            raise SystemExit(_CONFIG_EXIT) from None
        except StoreError as exc:
            _log.critical("worker cannot start: store %s", exc.code)
            raise SystemExit(EXIT_HALTED) from None
        except Exception as exc:  # noqa: BLE001 - one line and a non-zero status, no traceback
            _log.critical("worker cannot start: %s", type(exc).__name__)
            raise SystemExit(EXIT_CRASHED) from None

    def _create(self, c: Any) -> None:
        settings: Settings = c.app.settings
        install_redaction()
        runtime.install(settings)
        self.events = _event_exporter(settings)
        rt = runtime.current(settings)
        runtime.tune_gc(runtime.GC_GEN0_THRESHOLD)
        self.live_runtime = _live_runtime(settings, rt.halt)
        if self.live_runtime is not None:  # (a supervised child beside live adapts on its own)
            rt.adapt_in_flight()  # leave the judge room for live requests
        self.runtime = rt
        events: EventSink | None = self.events
        other = Intake(Handler(rt, events=events), c)
        live = None
        if self.live_runtime is not None:  # one count of held bytes for the process
            live = Intake(Handler(self.live_runtime, events=events), c, other.held)
        c.evalq_intake = Intakes(other, live)
        self.halt = rt.halt
        rt.halt.on_stop(_warm_shutdown)
        self._serve_metrics(settings)
        _watch_parent()

    def _serve_metrics(self, settings: Settings) -> None:
        port = settings.metrics_port
        if port is None or os.environ.get(PARENT_ENV):
            return
        self.exporter = metrics.start_exporter(port, addr=settings.metrics_addr)
        _log.info("metrics exporter on %s:%d", settings.metrics_addr, self.exporter.port)

    def start(self, c: Any) -> None:
        """Size the prefetch (before consuming starts; again after a reconnect) and renew the
        leases of held messages every quarter of the visibility timeout."""
        intake: Intakes | None = getattr(c, "evalq_intake", None)
        if intake is not None:
            broker.size_prefetch(c, intake.held, now=True)
        if intake is None or self._renewals is not None:
            return
        every_s = c.app.settings.effective_visibility_timeout_s / 4
        self._renewals = c.timer.call_repeatedly(every_s, intake.renew_leases)

    def close(self, c: Any) -> None:
        """Warm shutdown: let the messages in flight finish and be acked (bounded)."""
        intake: Intakes | None = getattr(c, "evalq_intake", None)
        c.evalq_stopping = True  # acks now go straight to the broker: the hub no longer runs
        if intake is None:
            return
        intake.flush_pending()
        if not intake.in_flight:
            return
        for rt in (self.runtime, self.live_runtime):
            if rt is not None:
                rt.stop_starting()  # what has not started goes back to the broker
        if self.halt is not None and self.halt.reason is not None:  # their writes would fail
            _log.warning("halted: %d message(s) left unacked for redelivery", intake.in_flight)
            return
        timeout_s = c.app.settings.shutdown_drain_s
        _log.info("waiting up to %.0f s for %d message(s) in flight", timeout_s, intake.in_flight)
        try:
            finished = intake.wait_settled(timeout_s)
        except Exception as exc:  # noqa: BLE001 - shutdown goes on; unacked messages come back
            _log.warning("drain failed (%s)", type(exc).__name__)
            return
        intake.flush_pending()
        if not finished:
            _log.warning("%d message(s) left unacked; the broker redelivers them", intake.in_flight)

    def shutdown(self, c: Any) -> None:
        """Close the runtime (judge client, store, loop) and the metrics exporter."""
        del c
        exporter, self.exporter = self.exporter, None
        if exporter is not None:
            exporter.stop()
        live, self.live_runtime = self.live_runtime, None
        if live is not None:
            live.close()
        runtime.shutdown()
        events, self.events = self.events, None
        if events is not None:  # after the runtimes: every committed record has its events
            events.shutdown()


def _event_exporter(settings: Settings) -> ResultExporter | None:
    """The evaluation-event exporter when ``EVALQ_OTLP_ENDPOINT`` is set (ConfigError when the
    ``otel`` extra is missing)."""
    if settings.otlp_endpoint is None:
        return None
    exporter = ResultExporter(settings.otlp_endpoint)
    _log.info("evaluation events to %s", exporter.shown_url)
    return exporter


def _live_runtime(settings: Settings, halt: Halt) -> runtime.Runtime | None:
    """A runtime of the live lane's own, when the process serves other lanes too (it shares
    the process's halt: a store fault seen by either stops both)."""
    if len(settings.lane_groups) == 1:
        return None
    return runtime.Runtime(settings, halt=halt)


def _warm_shutdown(exit_status: int) -> None:
    """What Celery's SIGTERM handler does, with ``exit_status``: the consumer's loop reads it
    every iteration and stops warm (``Lifecycle.close``: running evaluations finish, the other
    held messages are requeued or, past the drain, stay unacked for redelivery)."""
    celery_state.should_stop = exit_status  # type: ignore[assignment]  # None in the stubs


def _watch_parent() -> None:
    """In a supervised child: shut down warm when the supervisor is gone."""
    expected = os.environ.get(PARENT_ENV)
    if not expected or not expected.isdigit():
        return

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(_PARENT_CHECK_S):
            if os.getppid() != int(expected):
                _log.warning("supervisor %s gone; shutting down", expected)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=watch, name="evalq-parent-watch", daemon=True).start()
