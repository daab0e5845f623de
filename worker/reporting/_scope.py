"""What a report covers: :class:`ReportScope` (time range, backfill, metric set, slice, metrics).

See :mod:`worker.reporting` for how a backfill's evaluations are tied to it.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime

from worker.store import RecordScope

from ._frozen import Frozen

__all__ = ["ReportScope", "ScenarioKey", "SliceKey", "parse_when"]

SliceKey = Literal["agent_version", "environment", "tool"]
ScenarioKey = Literal["agent_version", "environment", "tool", "source"]


class ReportScope(Frozen):
    """What a report covers (see the module docstring) and how it groups."""

    since: AwareDatetime | None = None
    until: AwareDatetime | None = None
    backfill_id: str | None = None
    lane: str | None = None
    metric_set: str | None = None
    metric_set_version: str | None = None
    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None
    metric_ids: tuple[str, ...] = ()
    scenario_by: ScenarioKey = "tool"
    slice_by: SliceKey = "agent_version"
    pool_versions: bool = False

    def records(self) -> RecordScope:
        """The store-side filter: the scope's records, each unit's newest evaluation per
        metric-set version only (``RecordScope.newest``)."""
        return RecordScope(
            since=self.since,
            until=self.until,
            backfill_id=self.backfill_id,
            lane=self.lane,
            metric_set=self.metric_set,
            metric_set_version=self.metric_set_version,
            agent_version=self.agent_version,
            environment=self.environment,
            tool=self.tool,
            newest=True,
        )

    def wants(self, metric_id: str) -> bool:
        """True when ``metric_id`` is in the metric set asked for (all when none was)."""
        return not self.metric_ids or metric_id in self.metric_ids


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: datetime) -> datetime:
    """An ISO 8601 date/time (naive means UTC) or a duration ago: ``30m``, ``6h``, ``7d``, ``2w``.

    Raises ``ValueError`` for anything else.
    """
    value = text.strip()
    relative = _RELATIVE.match(value.lower())
    if relative:
        return now - timedelta(seconds=float(relative.group(1)) * _UNIT_S[relative.group(2)])
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        parsed = datetime.combine(date.fromisoformat(value), datetime.min.time())
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
