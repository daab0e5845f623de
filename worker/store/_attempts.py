"""Attempts: how a re-evaluation of the same snapshot and metric-set version is told apart.

The store's uniqueness rule is one evaluation per (snapshot id, metric-set version, run). A
re-evaluation after a failure (``evalq retry``, the automatic ``[retry]`` policy) is a new
*attempt* written under its own ``run``: attempt 1 is ``""`` (every evaluation before this rule,
and every first evaluation since), attempt N >= 2 is ``"attempt:N"``. The evaluation id stays
deterministic (``evaluation_id_for(snapshot, version, run)``), so a redelivered retry of attempt
N converges on one record, and nothing earlier is ever changed: the failed attempt stays as it
was, and the new one links to it (``previous_evaluation_id``).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ATTEMPT_PREFIX", "attempt_of", "attempt_run"]

ATTEMPT_PREFIX: Final = "attempt:"
"""``run`` of attempt N >= 2 is this prefix and N in decimal (no leading zero)."""
_ATTEMPT = re.compile(r"attempt:([2-9]|[1-9][0-9]+)")


def attempt_run(attempt: int) -> str:
    """The ``run`` of attempt ``attempt`` (``""`` for 1). ``ValueError`` below 1."""
    if type(attempt) is not int or attempt < 1:
        raise ValueError("an attempt is a whole number from 1")
    return "" if attempt == 1 else f"{ATTEMPT_PREFIX}{attempt}"


def attempt_of(run: str) -> int | None:
    """The attempt a ``run`` names (1 for ``""``), or None for a run that is not an attempt."""
    if run == "":
        return 1
    matched = _ATTEMPT.fullmatch(run)
    return int(matched.group(1)) if matched else None
