"""Retries of the HTTP judges: which failures are transient, how long to wait, when to stop.

Why the wait is computed here rather than by stamina: it must be known *before* it is scheduled,
so that no wait (and no ``Retry-After``) ever runs past the evaluator's deadline
(:func:`worker.judges.remaining_s`). stamina still drives the loop, through :class:`RetryPlan`
as its backoff hook.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ._deadline import remaining_s
from ._errors import JudgeError

__all__ = ["RetryPlan", "RetryPolicy", "is_retryable_status", "parse_retry_after"]


def is_retryable_status(status: int) -> bool:
    """408, 429 and every 5xx (529 "overloaded" included) are transient."""
    return status in (408, 429) or 500 <= status <= 599


def parse_retry_after(headers: Mapping[str, str], now_s: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (delta-seconds or HTTP-date) or None."""
    if (millis := _seconds(headers.get("retry-after-ms"))) is not None:
        return millis / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    if (seconds := _seconds(value)) is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT; a naive parse means the zone was "-0000"
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


@dataclass(frozen=True)
class RetryPolicy:
    """How hard an HTTP judge tries; the evaluator's deadline caps all of it.

    Defaults follow the AgentScope client: 3 attempts, 0.5 s backoff doubling up to 4 s.
    ``Retry-After`` replaces the backoff; one longer than ``retry_after_cap_s`` ends the retries.
    """

    attempts: int = 3
    attempt_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 4.0
    backoff_jitter_s: float = 0.1
    retry_after_cap_s: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        durations = (self.attempt_timeout_s, self.backoff_initial_s, self.backoff_max_s)
        if not all(math.isfinite(d) and d > 0 for d in durations):
            raise ValueError("attempt timeout and backoff durations must be finite and > 0")
        others = (self.backoff_jitter_s, self.retry_after_cap_s)
        if not all(math.isfinite(d) and d >= 0 for d in others):
            raise ValueError("jitter and retry_after cap must be finite and >= 0")

    def backoff_s(self, failures: int) -> float:
        """Exponential backoff after the ``failures``-th failure (1-based), with jitter."""
        base = min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** (failures - 1))
        return base + random.uniform(0, self.backoff_jitter_s)


class RetryPlan:
    """Per call: the stamina backoff hook that decides whether, and how long, to wait."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._failures = 0
        self.retry_after_s: float | None = None  # set by the attempt that saw the header

    def __call__(self, exc: BaseException) -> bool | float:
        self._failures += 1
        retry_after, self.retry_after_s = self.retry_after_s, None
        if not isinstance(exc, JudgeError) or not exc.retryable:
            return False
        if retry_after is not None and retry_after > self._policy.retry_after_cap_s:
            return False  # waiting less than the server asks would only be refused again
        wait_s = self._policy.backoff_s(self._failures) if retry_after is None else retry_after
        left_s = remaining_s()
        if left_s is not None and wait_s >= left_s:
            return False  # never sleep into (or past) the evaluator's deadline
        return wait_s
