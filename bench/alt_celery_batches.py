"""AN ALTERNATIVE MEASURED AND NOT KEPT: evalq's execution as a celery-batches task.

Issue 17 asked for the execution to be built as our own consumer/pool or on a well-kept library;
celery-batches (BSD-3) was the library candidate. This app is the prototype that was measured
against evalq's own consumer (``bench/execution_models.py``; docs/concurrency.md, "Execution
model: what we tried"). It is a bench fixture, not part of the worker, and celery-batches is not
a dependency of evalq (install it by hand to run this: ``pip install --no-deps celery-batches``;
0.11 declares ``celery<5.7`` and evalq runs Celery 5.7, on which it worked for these runs).

What it does: ``evalq.evaluate`` is registered as a ``Batches`` task. Celery's stock consumer
builds a ``Request`` per message (celery-batches' strategy), buffers them, and flushes every
``FLUSH_EVERY`` requests or every ``FLUSH_INTERVAL_S``; each flush is one call of the batch body
in a pool thread (``-P threads``). The body runs evalq's own handling path for every request of
the batch on this process's runtime loop (:class:`worker.handling.Handler`, the same one evalq's
consumer uses: decode, skip-if-done, evaluate, group commit) and waits for all their verdicts.

celery-batches' semantics, as they are: with ``acks_late`` every request of a batch is acked when
the body returns, together, and also when it raises (its trace logs the error and returns); a
single request cannot be rejected. So a message whose records the store could not take
(``Verdict.REQUEUE``) is re-published by the body before it returns (a new message; the old one
is then acked), and a batch's messages are acked only when its slowest evaluation has finished.

Run (the bench does): ``EVALQ_* celery -A bench.alt_celery_batches worker -P threads
--concurrency 64 --queues evalq.live ...``.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, signals
from celery_batches import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
    Batches,
    SimpleRequest,
)

from bench import _store_counts
from producer.topology import ENQUEUED_AT_HEADER, EVALUATE_TASK, lane_of_queue
from worker import runtime
from worker.app import celery_config, install_json_decoder
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler, Verdict
from worker.settings import load_settings

__all__ = ["FLUSH_EVERY", "FLUSH_INTERVAL_S", "app", "evaluate"]

FLUSH_EVERY = int(os.environ.get("BENCH_FLUSH_EVERY", "16"))
"""Requests per batch (celery-batches' ``flush_every``)."""
FLUSH_INTERVAL_S = float(os.environ.get("BENCH_FLUSH_INTERVAL_S", "0.01"))
"""A partial batch waits at most this long (celery-batches' ``flush_interval``)."""

_store_counts.install()
_settings = load_settings()
install_json_decoder()
app = Celery("evalq-alt-batches", set_as_current=False)
app.conf.update(celery_config(_settings, _settings.require_broker()))
# celery-batches is a task strategy: it needs Celery's own consumer and a pool that runs the
# batch body (threads: several batches in flight; solo would run one batch at a time).
app.conf.worker_consumer = "celery.worker.consumer:Consumer"
app.conf.worker_pool = "threads"
_handler: Handler | None = None


@signals.worker_init.connect
def _build_runtime(**_: Any) -> None:
    """Build the runtime and handler at start, as evalq's lifecycle step does."""
    global _handler  # noqa: PLW0603 - one handler per process, as in the worker
    runtime.install(_settings)
    rt = runtime.current(_settings)
    runtime.tune_gc(runtime.GC_GEN0_THRESHOLD)
    _handler = Handler(rt)


@signals.worker_shutdown.connect
def _close_runtime(**_: Any) -> None:
    runtime.shutdown()


def _delivery(request: SimpleRequest) -> Delivery:
    """A :class:`Delivery` from what celery-batches keeps of a message."""
    args = tuple(request.args)
    kwargs = dict(request.kwargs)
    info = request.delivery_info or {}
    lane = lane_of_queue(info.get("routing_key") or info.get("queue"))
    headers = request.request_dict or {}
    stamp = headers.get(ENQUEUED_AT_HEADER)
    enqueued_at = float(stamp) if isinstance(stamp, int | float) else None
    raw = raw_bytes([list(args), kwargs])
    return Delivery(EVALUATE_TASK, args, kwargs, lane, raw, enqueued_at)


@app.task(
    base=Batches,
    name=EVALUATE_TASK,
    flush_every=FLUSH_EVERY,
    flush_interval=FLUSH_INTERVAL_S,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def evaluate(requests: list[SimpleRequest]) -> None:
    """Handle a whole batch on the runtime's loop; celery-batches acks it when this returns."""
    handler = _handler
    if handler is None:
        raise RuntimeError("the runtime was not built (worker_init did not run)")
    rt = handler.rt
    deliveries = [_delivery(r) for r in requests]
    verdicts = rt.call(handler.handle(deliveries), timeout_s=rt.settings.longest_task_s)
    for request, verdict in zip(requests, verdicts, strict=True):
        if verdict is Verdict.REQUEUE:  # no per-request reject in celery-batches: send it again
            queue = (request.delivery_info or {}).get("routing_key")
            app.send_task(EVALUATE_TASK, args=request.args, queue=queue)
