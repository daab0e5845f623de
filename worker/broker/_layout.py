"""kombu's Redis key layout, written down once (kombu 5.7 defaults; evalq changes none of them).

A queue ``q`` is a list per priority step (``q``, ``q\\x06\\x163``, ``q\\x06\\x166``,
``q\\x06\\x169``); messages delivered and not yet acked are in the ``unacked`` hash (tag →
``[payload, exchange, routing_key]``) and the ``unacked_index`` sorted set (tag → delivery time,
the score the visibility-timeout restore and evalq's lease renewal read and write).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PRIORITY_SEP", "PRIORITY_STEPS", "UNACKED_INDEX_KEY", "UNACKED_KEY", "queue_keys"]

PRIORITY_STEPS: tuple[int, ...] = (0, 3, 6, 9)
PRIORITY_SEP = "\x06\x16"
UNACKED_KEY = "unacked"
UNACKED_INDEX_KEY = "unacked_index"


def queue_keys(
    queue: str,
    prefix: str = "",
    steps: Sequence[int] = PRIORITY_STEPS,
    sep: str = PRIORITY_SEP,
) -> tuple[str, ...]:
    """The Redis lists holding ``queue``'s messages, highest priority first."""
    return tuple(prefix + (queue if step == 0 else f"{queue}{sep}{step}") for step in steps)
