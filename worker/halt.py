"""Halting a consumer process that cannot go on: one log line with the reason, a non-zero exit.

A worker whose store stays unavailable past the hold bound (``EVALQ_STORE_HOLD_S``), whose
SQLite file was replaced under it, or whose store refuses a dead letter for good (the last
resort for what it cannot keep: :mod:`worker.handling`), must not keep fetching: every message
would be requeued, fetched again and requeued (a hot loop), or worse, acked into a file nobody
reads. The first
:meth:`Halt.stop` logs one line with the reason code (``worker halted: STORE_FULL; ...``), makes
every later store write fail at once (nothing is acked from then on; messages in flight are
requeued) and runs the stop hooks: the consumer's lifecycle step asks Celery for a warm shutdown
with :data:`EXIT_HALTED`, so the process ends non-zero and a supervisor (``evalq worker``'s,
systemd's) sees it and restarts it once the fault is fixed.

One :class:`Halt` per runtime (in-process tests build their own): no module state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["EXIT_CRASHED", "EXIT_HALTED", "Halt"]

_log = logging.getLogger(__name__)
EXIT_CRASHED = 1
"""Exit status of a consumer that crashed (an exception escaped Celery's consumer or its start)."""
EXIT_HALTED = 75
"""Exit status of a consumer halted on a store fault (``EX_TEMPFAIL``: try again later)."""


class Halt:
    """Whether, and why, this process stopped consuming (see the module docstring)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.exit_status = EXIT_HALTED
        self._hooks: list[Callable[[int], None]] = []
        self._lock = threading.Lock()

    def on_stop(self, hook: Callable[[int], None]) -> None:
        """Run ``hook(exit_status)`` when the process halts (at once if it already has)."""
        with self._lock:
            self._hooks.append(hook)
            reason = self.reason
        if reason is not None:
            hook(self.exit_status)

    def stop(self, reason: str, why: str, *, exit_status: int = EXIT_HALTED) -> bool:
        """Halt with ``reason`` (a code) unless already halted; True if this call halted."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason, self.exit_status = reason, exit_status
            hooks = list(self._hooks)
        _log.error("worker halted: %s; %s; stopping (nothing more is acked)", reason, why)
        for hook in hooks:
            hook(exit_status)
        return True
