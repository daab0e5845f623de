"""Running a worker (``evalq worker``, ``python -m worker``): check the store, then serve.

With ``processes`` > 1 this process supervises that many consumer processes
(:mod:`worker.supervisor`); with one it is the consumer (:func:`worker.app.create_app`).
"""

from __future__ import annotations

import contextlib
import logging
import os

from worker.app import create_app
from worker.auto_retry import automatic_retries
from worker.lifecycle import PARENT_ENV
from worker.log_redaction import install_redaction
from worker.otel_export import require_extra
from worker.settings import ConfigError, Settings
from worker.store import StoreError, failure_line, open_store
from worker.supervisor import Supervisor

__all__ = ["preflight", "run_worker", "worker_argv"]


def worker_argv(settings: Settings, hostname: str | None = None) -> list[str]:
    """Celery worker arguments of ONE consumer process (lane queues, prefetch, events on)."""
    name = hostname or f"evalq-{os.getpid()}@%h"
    return [
        "worker",
        "--pool=solo",  # never given a message: evalq's consumer evaluates on the event loop
        f"--concurrency={settings.process_concurrency}",  # prefetch: one message per slot
        f"--queues={','.join(settings.queues)}",
        f"--loglevel={settings.log_level}",
        f"--hostname={name}",
        "--task-events",
        "--without-gossip",
        "--without-mingle",
    ]


def preflight(settings: Settings) -> None:
    """Fail fast, naming ``EVALQ_STORE_URL``, when the store cannot be opened (and migrated),
    and naming ``EVALQ_OTLP_ENDPOINT`` when it is set without the ``otel`` extra."""
    if settings.otlp_endpoint is not None:
        require_extra()
    try:
        store = open_store(settings.store_url)
    except StoreError as exc:
        raise ConfigError(failure_line(settings.store_url, exc.code)) from None
    except ValueError as exc:  # the store's URL errors already name the variable
        raise ConfigError(str(exc)) from None
    store.close()


def run_worker(settings: Settings, *, hostname: str | None = None) -> int:
    """Run a worker until it is stopped; its exit status.

    The store is checked first, so a worker that could never record anything does not start.
    A supervised consumer skips the check (its supervisor made it): a store unreachable when it
    is restarted ends it with 75, which the supervisor backs off and retries, not with 2, which
    stops the whole worker. With ``[retry] max_attempts`` > 1 the top process also runs the
    automatic retry pass (:mod:`worker.auto_retry`).
    """
    supervised = bool(os.environ.get(PARENT_ENV))
    if not supervised:
        preflight(settings)
    if settings.processes > 1:
        _log_like_celery(settings.log_level)
    # The automatic retry pass runs once per worker: in its top process, never in each child.
    with contextlib.nullcontext() if supervised else automatic_retries(settings):
        if settings.processes > 1:
            return Supervisor(settings, hostname).run()
        return create_app(settings).serve(worker_argv(settings, hostname))


def _log_like_celery(level: str) -> None:
    """The supervisor runs no Celery worker, so nothing configures its logging: without this
    its INFO lines (children started, the retry pass) never reach the worker's log. Redacted
    as the consumers' logs are (reason codes and exception types, never their text)."""
    logging.basicConfig(
        level=level.upper(), format="[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"
    )
    install_redaction()
