"""A time flag (``--since 6h``, ``--content-before 90d``): ISO time or a duration ago."""

from __future__ import annotations

from datetime import UTC, datetime

from ._common import invalid

__all__ = ["when"]


def when(flag: str, text: str, example: str, now: datetime | None = None) -> datetime:
    """``text`` as an aware datetime (durations back from ``now``), else ``--flag: …``, exit 2."""
    from worker.reporting import parse_when  # noqa: PLC0415 - fast --help

    try:
        return parse_when(text, now or datetime.now(UTC))
    except ValueError:
        invalid(f"--{flag}: expected an ISO date/time or a duration such as {example}")
