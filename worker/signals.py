"""Cross-cutting worker concerns wired to Celery signals: process runtime and logging.

- ``worker_process_init`` (a prefork child, after fork) and ``worker_ready`` (the main process,
  where the threads pool and the consumer live) build the per-process runtime eagerly, so the first
  task does not pay for it and a broken store or judge configuration shows at start.
  With ``EVALQ_EVALUATOR_PROCESSES`` set, ``worker_ready`` also spawns the evaluator processes
  (``worker.evaluators``).
- ``worker_process_shutdown`` / ``worker_shutdown`` close it (judge client, store, loop), the
  evaluator processes first (each finishes the messages it holds).
- With ``EVALQ_METRICS_PORT`` set, the main process serves ``/metrics`` (``worker.metrics``):
  with the threads pool one process holds every counter.
- ``after_setup_logger`` / ``after_setup_task_logger`` install a filter that strips exception text
  and tracebacks from every record of the worker's loggers: logs carry reason codes and exception
  *types*, never messages that could quote snapshot content, keys or model output.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals as celery_signals

from worker import evaluators, metrics, runtime, tasks
from worker.app import EvalqApp

__all__ = ["RedactingFilter", "connect", "install_redaction"]

_log = logging.getLogger(__name__)
_exporter: metrics.Exporter | None = None


class RedactingFilter(logging.Filter):
    """Drop exception text and tracebacks from log records; keep the exception type name."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place; never suppresses it."""
        if record.exc_info and record.exc_info[0] is not None:
            record.msg = f"{record.msg} [{record.exc_info[0].__name__}]"
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


def install_redaction(logger: logging.Logger | None = None, **_: Any) -> None:
    """Add :class:`RedactingFilter` to ``logger`` (default: the root) and its handlers, once."""
    target = logger or logging.getLogger()
    if not any(isinstance(f, RedactingFilter) for f in target.filters):
        target.addFilter(RedactingFilter())
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def _start_runtime(**_: Any) -> None:
    rt = runtime.current()
    runtime.tune_gc(rt.settings.gc_gen0_threshold)


def _start_worker_process(**_: Any) -> None:
    """The main process: build the runtime and serve /metrics when EVALQ_METRICS_PORT is set."""
    global _exporter  # noqa: PLW0603 - one exporter per worker process tree
    rt = runtime.current()
    runtime.tune_gc(rt.settings.gc_gen0_threshold)
    if rt.settings.evaluator_processes:
        tasks.start_evaluators(rt)  # spawned now, so the first messages do not wait for them
    port = rt.settings.metrics_port
    if port is not None and _exporter is None:
        _exporter = metrics.start_exporter(port, addr=rt.settings.metrics_addr)
        _log.info("metrics exporter on %s:%d", rt.settings.metrics_addr, _exporter.port)


def _stop_runtime(**_: Any) -> None:
    runtime.shutdown()


def _stop_worker(**_: Any) -> None:
    global _exporter
    exporter, _exporter = _exporter, None
    if exporter is not None:
        exporter.stop()
    evaluators.shutdown()  # each finishes the messages it holds first
    runtime.shutdown()


def _child_exited(pid: int = 0, **_: Any) -> None:
    metrics.mark_process_dead(pid)  # prefork + multiprocess mode only; a no-op otherwise


def connect(app: EvalqApp) -> None:
    """Install ``app``'s settings for the runtime and connect the signal handlers (once)."""
    runtime.install(app.settings)
    celery_signals.worker_process_init.connect(_start_runtime, dispatch_uid="evalq.rt.init")
    celery_signals.worker_ready.connect(_start_worker_process, dispatch_uid="evalq.rt.ready")
    celery_signals.worker_process_shutdown.connect(_stop_runtime, dispatch_uid="evalq.rt.pstop")
    celery_signals.worker_process_shutdown.connect(_child_exited, dispatch_uid="evalq.rt.dead")
    celery_signals.worker_shutdown.connect(_stop_worker, dispatch_uid="evalq.rt.stop")
    celery_signals.after_setup_logger.connect(install_redaction, dispatch_uid="evalq.log")
    celery_signals.after_setup_task_logger.connect(install_redaction, dispatch_uid="evalq.tlog")
