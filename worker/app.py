"""The one Celery app factory: :func:`create_app` builds the worker's app from :class:`Settings`.

Reliability settings follow measured Celery 5.7 / kombu 5.7 facts (``docs/concurrency.md``):

- at-least-once: ``task_acks_late`` + ``task_reject_on_worker_lost``; a message is acked only
  after the transaction holding its records committed (:mod:`worker.committer`), duplicates are
  made harmless by the store's idempotent writes;
- JSON only (``accept_content=["json"]``): a pickle message is refused and dead-lettered;
- no result backend (results live in our store, not in broker memory);
- one queue per lane (:mod:`producer.topology`, shared with producers), consumed live-first
  on Redis;
- execution is evalq's own (:mod:`worker.consumer`, :mod:`worker.lifecycle`): Celery's consumer
  fetches (prefetch = the process's concurrency), evalq's intake hands messages to the event
  loop in micro-batches; Celery's ``solo`` pool is configured but never given a message;
- broker-specific knobs only in :mod:`worker.broker`.

The module attribute ``app`` (also ``celery``) is created lazily from the environment, for
``celery -A worker.app worker``; :mod:`worker.__main__` and ``evalq worker`` are the usual entries.
"""

from __future__ import annotations

import json
from typing import Any

import click
from celery import Celery
from kombu.serialization import registry  # type: ignore[attr-defined]  # not in the stubs
from kombu.utils import json as kombu_json

from producer.topology import celery_routing
from worker import tasks
from worker.broker import broker_transport_options, transport_setting
from worker.lifecycle import Lifecycle
from worker.settings import PREFETCH_MULTIPLIER, Settings, load_settings

__all__ = ["EvalqApp", "celery_config", "create_app", "install_json_decoder"]


def _json_loads(data: Any) -> Any:
    """kombu's JSON decoder without its per-object Python hook where no object can need it.

    kombu calls an ``object_hook`` for every JSON object of a body, only to turn
    ``{"__type__": ..., "__value__": ...}`` pairs back into dates, UUIDs or bytes. A body whose
    text never mentions ``__type__`` holds no such pair, so the C parser alone decodes it to the
    very same value (measured: the hook was ~15% of a backfill worker's CPU, one call per object
    of every snapshot); any other body goes to kombu's own decoder.
    """
    text = bytes(data).decode("utf-8") if isinstance(data, bytes | bytearray | memoryview) else data
    if "__type__" in text:
        return kombu_json.loads(text)
    return json.loads(text)


def install_json_decoder() -> None:
    """Use :func:`_json_loads` for ``application/json`` in this process (same results, faster)."""
    registry.register("json", kombu_json.dumps, _json_loads, "application/json", "utf-8")


def celery_config(settings: Settings, broker_url: str) -> dict[str, Any]:
    """The complete Celery configuration for ``settings`` on ``broker_url``."""
    return {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": broker_transport_options(settings, broker_url),
        **transport_setting(broker_url),
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,  # failures are dead-lettered by the handler
        # prefetch = 2 x the process's slots: the next messages are already on the loop when a
        # slot frees, so the fetch round trip is not on a slot's critical path (bench/lanes.py:
        # latency-bound throughput); a fetch takes at most the free prefetch slots.
        "worker_prefetch_multiplier": PREFETCH_MULTIPLIER,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_soft_shutdown_timeout": settings.shutdown_drain_s + 1.0,
        "worker_enable_soft_shutdown_on_idle": True,
        "worker_disable_rate_limits": True,
        "worker_concurrency": settings.process_concurrency,
        "worker_pool": "solo",  # never given a message: evalq's consumer runs the evaluations
        "worker_consumer": "worker.consumer:EvalqConsumer",
        "worker_hijack_root_logger": True,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        **celery_routing(),  # lane queues, exchange, task routes: the contract's topology
    }


class EvalqApp(Celery):
    """A Celery app that carries the :class:`Settings` it was built from (read after fork)."""

    def __init__(self, settings: Settings, broker_url: str) -> None:
        super().__init__("evalq", set_as_current=False)
        self.settings = settings
        self.conf.update(celery_config(settings, broker_url))

    def serve(self, argv: list[str]) -> int:
        """Run ``celery worker`` with ``argv`` (``["worker", ...]``); the status it ended with.

        Celery's ``worker_main`` drops that status: a worker that died of an unrecoverable error
        exited 0, so a restart-on-failure supervisor never restarted it. A halted worker
        (:mod:`worker.halt`) ends with the halt's status the same way.
        """
        from celery.bin.celery import celery as command  # noqa: PLC0415 - Celery's CLI, on use

        command.params[0].default = self  # what Celery.start does: the CLI's --app
        try:
            status = command.main(args=argv, standalone_mode=False)
        except click.exceptions.Exit as exc:
            status = exc.exit_code
        finally:
            command.params[0].default = None
        return status if isinstance(status, int) else 0


def create_app(settings: Settings | None = None, *, broker_url: str | None = None) -> EvalqApp:
    """Build the worker app: configuration, the tasks and the evalq consumer bootstep.

    ``broker_url`` overrides ``settings.broker_url``; without either,
    :class:`~worker.settings.ConfigError` names ``EVALQ_BROKER_URL``. Building an app (a test, a
    script) has no process-global side effects: process setup is the bootstep's, and runs only
    when a worker starts.
    """
    settings = settings or load_settings()
    url = broker_url or settings.require_broker()
    install_json_decoder()
    app = EvalqApp(settings, url)
    tasks.register(app)
    app.steps["consumer"].add(Lifecycle)
    return app


_default: EvalqApp | None = None


def __getattr__(name: str) -> EvalqApp:
    """``app`` / ``celery``: the app built from the environment, on first use (for ``-A``)."""
    global _default  # noqa: PLW0603 - one lazily built app per process, by design
    if name not in ("app", "celery"):
        raise AttributeError(name)
    if _default is None:
        _default = create_app()
    return _default
