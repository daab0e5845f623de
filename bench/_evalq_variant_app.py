"""evalq's worker app with one bench-only variation, to explain the celery-batches comparison.

``BENCH_VARIANT`` picks them, joined by ``+`` (``bench/execution_models.py`` models
``evalq-*``, e.g. ``evalq-linger+no-events``); the worker's code is unchanged, the variations are
applied here:

- ``plain``: the worker app as it is (the control: the same as ``evalq worker``'s children);
- ``no-events``: no task events (celery-batches sends none: its strategy skips
  ``task-received`` and its batch trace sends no ``task-succeeded``);
- ``linger``: the intake waits ``BENCH_LINGER_S`` (default 0.01 s, celery-batches' flush
  interval in the comparison) after the first message of a micro-batch before handing it to the
  loop, so micro-batches are larger, as celery-batches' batches are;
- ``commit-linger``: the group committer, when idle, waits ``BENCH_LINGER_S`` before it writes
  (so records finishing close together share a transaction even when none is running).
"""

from __future__ import annotations

import asyncio
import os
from functools import partial

from bench import _store_counts
from worker.app import create_app
from worker.committer import Committer, _Pending
from worker.consumer import Intake
from worker.settings import load_settings
from worker.store import Written

__all__ = ["VARIANTS", "app"]

VARIANTS = frozenset(os.environ.get("BENCH_VARIANT", "plain").split("+"))
_LINGER_S = float(os.environ.get("BENCH_LINGER_S", "0.01"))

if "linger" in VARIANTS:

    def _put(self: Intake, message: object) -> None:
        self._incoming.append(message)  # type: ignore[arg-type]
        self._send_event("task-received", message)  # type: ignore[arg-type]
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(partial(self.loop.call_later, _LINGER_S, self._drain))

    Intake.put = _put  # type: ignore[method-assign]

if "commit-linger" in VARIANTS:

    async def _lingering_drain(self: Committer) -> None:
        await asyncio.sleep(_LINGER_S)
        await self._drain()

    async def _queue(self: Committer, pending: _Pending) -> Written | None:
        self._pending.append(pending)
        if self._writer is None or self._writer.done():
            self._writer = self.rt.loop.create_task(_lingering_drain(self))
        return await pending.written

    Committer._queue = _queue  # type: ignore[method-assign]

_store_counts.install()
app = create_app(load_settings())
if "no-events" in VARIANTS:
    app.conf.worker_send_task_events = False
