"""The bytes of message bodies one consumer process holds, against its budget.

Celery's prefetch counts messages (two per evaluation slot), not bytes: a backfill message may
carry 64 snapshots and 16 MiB, a live one 4 MiB, so at the default 128 slots per process a
worker could take gigabytes off the broker before it had a slot to start them, and more once
decoded. The consumer counts each message it takes (:meth:`HeldBytes.took`) and each it settles
(:meth:`HeldBytes.settled`); on Redis the reliable fetch takes nothing while the bodies held
reach the budget (``EVALQ_HELD_MIB``), and one fetch stops at the message that reaches what is
left, so a process holds at most the budget plus one message. One message at least is always
taken when nothing is held: a message larger than the budget is served, alone.

RabbitMQ pushes messages up to the prefetch count and has no byte bound (it does not implement
``basic.qos``'s ``prefetch_size``). There, and on the other kombu Redis fetches (``rediss://``,
``sentinel://``), the prefetch count itself is sized (:meth:`HeldBytes.prefetch`): the budget
over the largest recent body (a maximum that decays by 1% per message taken, so one huge
message lowers it for a few hundred messages, not for good), never above Celery's, and 1 until
the first message has told the size. The bound then holds for messages up to the largest recent
one; a larger one can overshoot by the prefetch it arrives in.
"""

from __future__ import annotations

import threading

__all__ = ["MIB", "HeldBytes"]

MIB = 1024 * 1024
_DECAY = 0.99
"""Per message taken, the factor on the largest recent body size (the prefetch's sizing)."""


class HeldBytes:
    """Bytes of the message bodies taken and not yet settled (thread-safe: the consumer's
    thread counts, and at shutdown the loop's thread settles)."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 1:
            raise ValueError("budget_bytes must be at least 1")
        self.budget_bytes = budget_bytes
        self.held_bytes = 0
        self.largest = 0.0
        """The largest recent body size (bytes): a maximum decaying per message taken."""
        self.sizes_prefetch = False
        """Set where the broker has no byte bound of its own: the prefetch count is sized."""
        self._lock = threading.Lock()

    def took(self, size: int) -> None:
        """A message of ``size`` body bytes was taken off the broker."""
        with self._lock:
            self.held_bytes += size
            self.largest = max(float(size), self.largest * _DECAY)

    def settled(self, size: int) -> None:
        """A message of ``size`` body bytes was acked or returned."""
        with self._lock:
            self.held_bytes = max(0, self.held_bytes - size)

    def left(self) -> int:
        """Bytes the process may still take (0: fetch nothing until a message settles)."""
        return max(0, self.budget_bytes - self.held_bytes)

    def prefetch(self, limit: int) -> int:
        """The messages a broker may push: the budget over the largest recent body, at most
        ``limit`` (Celery's prefetch), at least 1; 1 until a message has been taken."""
        if not self.largest:
            return 1
        return max(1, min(limit, int(self.budget_bytes // self.largest)))
