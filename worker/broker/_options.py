"""Broker URLs and transport options: the only place broker-specific knobs live.

On Redis the visibility timeout is sized from the longest possible message
(``Settings.effective_visibility_timeout_s``, not Celery's 1 h default) and kombu's restore sweep
runs every few seconds instead of every ~100 s, so the work of a dead worker is redelivered well
within 2 minutes; on RabbitMQ (real acks, redelivery on disconnect) none of these exist.
On ``redis://`` the worker consumes through the reliable fetch (:mod:`._reliable_fetch`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from worker.settings import Settings

__all__ = ["SWEEP_MUTEX_S", "broker_transport_options", "is_redis", "transport_setting"]

SWEEP_MUTEX_S = 10
"""Expiry of kombu's restore-sweep lock (``unacked_mutex``; kombu's default is 300 s). A sweep
holding it when Redis shut down leaves it in the AOF with its TTL, and until it expires no
process restores anything: the fault suite found a restart mid-backfill leaving 32-63
messages, already evaluated but not acked, in ``unacked`` for 2 minutes and more. A sweep takes
milliseconds; two overlapping after an early expiry are harmless (each restore is a
transaction on ``unacked``, so a message is restored once)."""

_REDIS_SCHEMES = ("redis", "rediss", "sentinel")
_RELIABLE_FETCH = "worker.broker._reliable_fetch:Transport"


def is_redis(broker_url: str) -> bool:
    """True for the Redis transports (where visibility timeouts and restore sweeps exist)."""
    return urlsplit(broker_url).scheme.lower() in _REDIS_SCHEMES


def broker_transport_options(settings: Settings, broker_url: str) -> dict[str, Any]:
    """Transport options for ``broker_url`` (empty for RabbitMQ)."""
    if not is_redis(broker_url):
        # RabbitMQ redelivers unacked messages when the consumer's connection closes; a
        # visibility timeout or restore sweep does not exist there.
        return {}
    return {
        "visibility_timeout": settings.effective_visibility_timeout_s,
        "unacked_restore_interval": settings.restore_interval_s,
        "unacked_restore_throttle": 1,  # scan on every sweep (kombu's default scans every 10th)
        "unacked_mutex_expire": SWEEP_MUTEX_S,
        "max_connections": 64,  # acks and events come from a few threads, never one per task
        "socket_timeout": 30,  # a vanished broker must not hang a publish forever
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
        "health_check_interval": 25,
        "queue_order_strategy": "priority",  # fetch live before backfill before outcomes
    }


def transport_setting(broker_url: str) -> dict[str, Any]:
    """The reliable-fetch transport for ``redis://`` (``broker_transport``), else nothing.

    Not for ``rediss://`` (kombu chooses its TLS defaults by that scheme name, which a transport
    class replaces) nor ``sentinel://`` (a channel of its own): those keep kombu's ``BRPOP``.
    """
    return {"broker_transport": _RELIABLE_FETCH} if urlsplit(broker_url).scheme == "redis" else {}
