"""The evaluator's deadline, visible to judges that retry.

The evaluator sets :data:`deadline` (a ``time.monotonic()`` instant) around each judge call; the
HTTP judges read :func:`remaining_s` so that no retry (and no ``Retry-After`` wait) is scheduled
past the evaluation's one total budget. The evaluator's ``asyncio.timeout`` is the hard cap; this
only stops judges from *starting* work that cannot finish in time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["deadline", "remaining_s", "use_deadline"]

deadline: ContextVar[float | None] = ContextVar("evalq_judge_deadline", default=None)


def remaining_s() -> float | None:
    """Seconds left before the current deadline, or ``None`` when no deadline is set."""
    at = deadline.get()
    return None if at is None else at - time.monotonic()


@contextlib.contextmanager
def use_deadline(at_monotonic: float) -> Iterator[None]:
    """Set the deadline for the judge calls made inside the block."""
    token = deadline.set(at_monotonic)
    try:
        yield
    finally:
        deadline.reset(token)
