"""Producing with a worker's configuration: the broker's transport options, the metric set.

``evalq enqueue``/``backfill``/``outcome``/``redrive`` and ``evalq run`` send through a
:class:`producer.Producer` built here, so they publish exactly as the workers consume.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from producer import ImportErrorReport, Producer, Snapshot, read_snapshots
from worker.broker import broker_transport_options
from worker.settings import Settings

__all__ = ["producer_for", "snapshots_for", "with_metric_set"]


def with_metric_set(snapshot: Snapshot, name: str) -> Snapshot:
    """``snapshot`` asking for metric set ``name`` (a new snapshot, so a new id, if it differs)."""
    if snapshot.metric_set == name:
        return snapshot
    return Snapshot.model_validate({**snapshot.wire(), "metric_set": name})


def snapshots_for(
    path: Path,
    settings: Settings,
    *,
    report: ImportErrorReport | None = None,
    format: str = "auto",  # noqa: A002 - mirrors read_snapshots
    unit: str = "invocation",
) -> Iterator[Snapshot]:
    """Snapshots of ``path`` stamped with the configured metric set."""
    for snapshot in read_snapshots(path, format, unit, report=report):
        yield with_metric_set(snapshot, settings.metric_set)


def producer_for(settings: Settings, broker_url: str | None = None) -> Producer:
    """A :class:`Producer` on the configured broker with the worker's transport options."""
    url = broker_url or settings.require_broker()
    return Producer(url, transport_options=broker_transport_options(settings, url))
