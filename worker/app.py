"""The one Celery app factory: :func:`create_app` builds the worker's app from :class:`Settings`.

Reliability settings follow the measured Celery 5.7 / kombu 5.7 facts in ``celery-notes.md``:

- at-least-once: ``task_acks_late`` + ``task_reject_on_worker_lost`` (a SIGKILLed task is
  otherwise lost), prefetch multiplier 1 (prefetched messages age toward the visibility timeout and
  block live work), duplicates made harmless by the store's idempotent writes;
- JSON only (``accept_content=["json"]``): a pickle message is refused and dead-lettered by
  :class:`worker.consumer.DeadLetterConsumer`;
- no result backend (results live in our store, not in broker memory);
- one queue per lane (``producer.snapshot.LANE_QUEUES``), consumed live-first on Redis
  (``queue_order_strategy=priority``); operators may also run separate pools per lane;
- broker-specific knobs only in :func:`broker_transport_options`: on Redis the visibility timeout is
  sized from the longest possible task (``Settings.effective_visibility_timeout_s``, not Celery's
  1 h default) and kombu's restore sweep runs every few seconds instead of every ~100 s, so work of
  a dead worker is redelivered well within 2 minutes; on RabbitMQ (real acks, redelivery on
  disconnect) none of these apply and nothing is set;
- on ``redis://`` the worker consumes through :mod:`worker._reliable_fetch` (``broker_transport``):
  a message is popped and recorded as unacked in one atomic step, so a worker killed mid-fetch
  loses nothing (kombu's ``BRPOP`` leaves a round trip in between).

The module attribute ``app`` (also ``celery``) is created lazily from the environment, for
``celery -A worker.app worker``; :mod:`worker.__main__` and ``evalq worker`` are the usual entries.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from celery.worker.request import Request
from kombu.serialization import registry  # type: ignore[attr-defined]  # not in the stubs
from kombu.utils import json as kombu_json

from producer._producer import LANE_EXCHANGE, lane_queues
from producer.snapshot import EVALUATE_TASK, LANE_QUEUES, OUTCOME_TASK, TALLY_TASK, Lane
from worker.settings import PoolKind, Settings, load_settings

__all__ = [
    "DecodedOnceRequest",
    "EvalqApp",
    "broker_transport_options",
    "celery_config",
    "create_app",
    "install_json_decoder",
    "is_redis",
]

_REDIS_SCHEMES = ("redis", "rediss", "sentinel")


def is_redis(broker_url: str) -> bool:
    """True for the Redis transports (where visibility timeouts and restore sweeps exist)."""
    return urlsplit(broker_url).scheme.lower() in _REDIS_SCHEMES


def broker_transport_options(settings: Settings, broker_url: str) -> dict[str, Any]:
    """Transport options for ``broker_url``; the only place broker-specific knobs live."""
    if not is_redis(broker_url):
        # RabbitMQ redelivers unacked messages when the consumer's connection closes; a
        # visibility timeout or restore sweep does not exist there.
        return {}
    return {
        "visibility_timeout": settings.effective_visibility_timeout_s,
        "unacked_restore_interval": settings.restore_interval_s,
        "unacked_restore_throttle": 1,  # scan on every sweep (kombu's default scans every 10th)
        "max_connections": max(64, 2 * settings.concurrency),  # acks come from pool threads
        "socket_timeout": 30,  # a vanished broker must not hang a publish forever
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
        "health_check_interval": 25,
        "queue_order_strategy": "priority",  # fetch live before backfill before outcomes
    }


_RELIABLE_FETCH = "worker._reliable_fetch:Transport"


def _transport(broker_url: str) -> dict[str, Any]:
    """The reliable-fetch transport for ``redis://`` (see :mod:`worker._reliable_fetch`).

    Not for ``rediss://`` (kombu chooses its TLS defaults by that scheme name, which a transport
    class replaces) nor ``sentinel://`` (a channel of its own): those keep kombu's ``BRPOP``.
    """
    return {"broker_transport": _RELIABLE_FETCH} if urlsplit(broker_url).scheme == "redis" else {}


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


class DecodedOnceRequest(Request):
    """Celery's task request, handed the body the consumer thread has already decoded.

    Celery 5.7's strategy reads ``message.payload`` in the consumer (a protocol-1 check, which
    decodes and caches the whole body) and then gives the pool the raw body, which the pool
    thread decodes a second time. For a protocol-2 payload (``[args, kwargs, embed]``) this
    request passes the decoded one instead (``decoded=True``, Celery's own path for
    pre-decoded bodies), so a backfill batch is parsed once (measured: ~1% of a busy worker's
    CPU). Decoding errors still surface in the consumer, where they are dead-lettered.
    """

    def __init__(self, message: Any, *args: Any, **kwargs: Any) -> None:
        if not kwargs.get("decoded") and kwargs.get("body") is message.body:
            payload = message.payload  # already decoded and cached by the strategy
            if isinstance(payload, list | tuple) and len(payload) == 3:
                kwargs.update(body=payload, decoded=True)
        super().__init__(message, *args, **kwargs)


def install_json_decoder() -> None:
    """Use :func:`_json_loads` for ``application/json`` in this process (same results, faster)."""
    registry.register("json", kombu_json.dumps, _json_loads, "application/json", "utf-8")


def _time_limits(settings: Settings) -> dict[str, Any]:
    # Only prefork can interrupt a running task; on threads Celery ignores limits entirely and
    # the task enforces its own backstop (worker.tasks), so nothing is configured there.
    if settings.pool is not PoolKind.PREFORK:
        return {}
    soft_s = settings.longest_task_s + 1.0
    return {"task_soft_time_limit": soft_s, "task_time_limit": soft_s + 10.0}


def celery_config(settings: Settings, broker_url: str) -> dict[str, Any]:
    """The complete Celery configuration for ``settings`` on ``broker_url``."""
    return {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": broker_transport_options(settings, broker_url),
        **_transport(broker_url),
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,  # failures are dead-lettered inside the task
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_soft_shutdown_timeout": settings.longest_task_s + 1.0,
        "worker_enable_soft_shutdown_on_idle": True,
        "worker_disable_rate_limits": True,
        "worker_concurrency": settings.pool_size,
        "worker_pool": settings.pool.value,
        "worker_consumer": "worker.consumer:DeadLetterConsumer",
        "worker_hijack_root_logger": True,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_queues": lane_queues(),
        "task_default_queue": LANE_QUEUES[Lane.LIVE],
        "task_default_exchange": LANE_EXCHANGE,
        "task_default_routing_key": LANE_QUEUES[Lane.LIVE],
        "task_routes": {
            EVALUATE_TASK: {"queue": LANE_QUEUES[Lane.LIVE]},
            OUTCOME_TASK: {"queue": LANE_QUEUES[Lane.OUTCOMES]},
            TALLY_TASK: {"queue": LANE_QUEUES[Lane.OUTCOMES]},
        },
        **_time_limits(settings),
    }


class EvalqApp(Celery):
    """A Celery app that carries the :class:`Settings` it was built from (read after fork)."""

    def __init__(self, settings: Settings, broker_url: str) -> None:
        super().__init__("evalq", set_as_current=False)
        self.settings = settings
        self.conf.update(celery_config(settings, broker_url))


def create_app(settings: Settings | None = None, *, broker_url: str | None = None) -> EvalqApp:
    """Build the worker app: configuration and the tasks (evaluate, outcome, sampling tally).

    ``broker_url`` overrides ``settings.broker_url``; without either,
    :class:`~worker.settings.ConfigError` names ``EVALQ_BROKER_URL``. Process-wide signal handlers
    are connected only by the processes that run a worker (:func:`worker.signals.connect`), so
    building an app (a test, a script) has no global side effects.
    """
    from worker import tasks  # noqa: PLC0415 - tasks import the runtime, which imports settings

    settings = settings or load_settings()
    url = broker_url or settings.require_broker()
    install_json_decoder()
    app = EvalqApp(settings, url)
    tasks.register(app)
    return app


_default: EvalqApp | None = None


def __getattr__(name: str) -> EvalqApp:
    """``app`` / ``celery``: the app built from the environment, on first use (for ``-A``)."""
    global _default  # noqa: PLW0603 - one lazily built app per process, by design
    if name not in ("app", "celery"):
        raise AttributeError(name)
    if _default is None:
        from worker import signals  # noqa: PLC0415 - only a worker process needs them

        _default = create_app()
        signals.connect(_default)
    return _default
