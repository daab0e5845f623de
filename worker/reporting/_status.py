"""``evalq status``: is evaluation keeping up, what is failing, and why was nothing scored?

:func:`collect_status` gathers one :class:`StatusReport` from two places:

- **the broker** (only when ``EVALQ_BROKER_URL`` is set): per-lane queue depth, delivered-but-
  unacked messages and the age of the oldest waiting message (Redis, through
  :class:`worker.metrics.QueueInspector`; RabbitMQ gives depth only, from a passive queue
  declare), and the workers online with their active tasks (Celery ``inspect ping`` and
  ``inspect active`` with a short timeout). A broker that does not answer is reported with a
  reason code, never a traceback;
- **the store**: evaluations created in the last 1 and 5 minutes (throughput), open dead letters
  by reason, backfills with their progress (latest checkpoints, and evaluated/failed read back
  by backfill id), and the *decision counts* over a recent window (``window_s``, 1 h by
  default) that answer "why was this trace not scored?".

Decision counts are over metric results (one per snapshot x metric) created in the window:
``scored`` (DECIDED), ``inconclusive`` (the judge abstained), ``incomplete_trace``,
``missing_evidence`` (MISSING_FIELDS, NO_EVIDENCE, NO_TOOL_RESULTS, NO_CLAIMS),
``evaluation_limit``, ``timeout`` and ``error`` (every other ERROR reason). Two decisions are
made before anything reaches a worker: ``sampled_out`` comes from the producers' sampling tallies
(units seen but not sampled, summed over tallies that ended in the window); with no tally in the
window it is ``null`` with ``known: false`` — "unknown", never a silent 0. ``not_ready`` (traces
the importer found unfinished) is not recorded anywhere and is always unknown. Beside
``sampled_out`` the report gives a Horvitz-Thompson *estimate* from the sampled snapshots'
weights, ``Σ (w - 1)`` over the window's evaluations: a snapshot sampled at rate r stands for 1/r
units, 1/r - 1 of them not sampled.

Backfill state: ``complete`` when every file it started has a ``complete:`` checkpoint (and
none of its snapshots failed: then ``failed``),
``running`` when its latest checkpoint is younger than ``stale_after_s``, else ``stalled``.
Status lists running, stalled and failed backfills (and counts the complete ones).

:class:`StatusThresholds` turn the report into a cron check: :meth:`StatusThresholds.breaches`
lists every breached threshold (``evalq status`` then exits 3). A threshold whose input is unknown
(no broker configured, broker down) counts as breached: a check that cannot see must not pass.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import AwareDatetime
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from producer import COMPLETE_PREFIX, FINGERPRINT_PREFIX, store_counts
from producer.snapshot import LANE_QUEUES
from worker.store import Checkpoint, RecordScope, ResultCount, Store

from ._frozen import Frozen
from ._model import MISSING_EVIDENCE_REASONS

if TYPE_CHECKING:
    from worker.settings import Settings

__all__ = [
    "BREACH_EXIT_CODE",
    "BackfillStatus",
    "BrokerStatus",
    "Decision",
    "Decisions",
    "LaneStatus",
    "QueuesStatus",
    "StatusReport",
    "StatusThresholds",
    "Throughput",
    "WorkersStatus",
    "backfill_statuses",
    "collect_status",
    "decisions_from_counts",
    "redact_url",
    "render_status",
]

BREACH_EXIT_CODE = 3
_SOCKET_TIMEOUT_S = 2.0


class LaneStatus(Frozen):
    """One lane's queue (``unacked``/``oldest_age_s`` null when the broker cannot say)."""

    lane: str
    queue: str
    depth: int
    unacked: int | None
    oldest_age_s: float | None


class QueuesStatus(Frozen):
    """Every lane at one instant."""

    lanes: tuple[LaneStatus, ...]
    unacked_total: int | None
    oldest_unacked_age_s: float | None


class WorkersStatus(Frozen):
    """Workers that answered ``inspect ping`` and their running tasks (``inspect active``)."""

    online: int
    names: tuple[str, ...]
    active_tasks: int


class BrokerStatus(Frozen):
    """Broker reachability: ``error`` is a code (``BROKER_NOT_CONFIGURED``, ``BROKER_UNREACHABLE``,
    ``INSPECT_FAILED``), the URL is shown without its password."""

    configured: bool
    url: str | None
    error: str | None
    queues: QueuesStatus | None
    workers: WorkersStatus | None


class Throughput(Frozen):
    """Evaluations recorded in the last 1 and 5 minutes (store ``created_at``)."""

    last_1m: int
    last_5m: int
    per_min_5m: float


class BackfillStatus(Frozen):
    """One backfill's progress from its latest checkpoints and the store's read-back."""

    backfill_id: str
    state: str
    files_started: int
    files_complete: int
    read: int
    enqueued: int
    evaluated: int
    failed: int
    last_checkpoint_at: AwareDatetime
    last_checkpoint_age_s: float


class Decision(Frozen):
    """One "why not scored" count; ``known`` false (and ``n`` null) when nothing records it."""

    code: str
    n: int | None
    known: bool
    note: str = ""


class Decisions(Frozen):
    """Decision counts over metric results created in the last ``window_s`` seconds."""

    window_s: float
    results: int
    decisions: tuple[Decision, ...]
    sampled_out_estimate: float


class StatusReport(Frozen):
    """Everything ``evalq status`` shows; ``breaches`` lists thresholds crossed (if any given)."""

    generated_at: AwareDatetime
    store: str
    broker: BrokerStatus
    throughput: Throughput
    dead_letters: dict[str, int]
    dead_letters_open: int
    backfills: tuple[BackfillStatus, ...]
    backfills_complete: int
    decisions: Decisions
    breaches: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-mode dict (what ``--json`` prints)."""
        return self.model_dump(mode="json")


# --- broker ------------------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (safe to print)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    netloc = f"{user}:***@{host}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _redis_queues(url: str) -> QueuesStatus:
    import redis  # noqa: PLC0415 - only for Redis brokers

    from worker.metrics import QueueInspector  # noqa: PLC0415

    client = redis.Redis.from_url(
        url, socket_timeout=_SOCKET_TIMEOUT_S, socket_connect_timeout=_SOCKET_TIMEOUT_S
    )
    try:
        stats = QueueInspector(client).snapshot()
    finally:
        client.close()
    lanes = tuple(
        LaneStatus(
            lane=s.lane,
            queue=s.queue,
            depth=s.depth,
            unacked=s.unacked,
            oldest_age_s=s.oldest_age_s,
        )
        for s in stats.lanes
    )
    return QueuesStatus(
        lanes=lanes,
        unacked_total=stats.unacked_total,
        oldest_unacked_age_s=stats.oldest_unacked_age_s,
    )


def _amqp_depth(conn: Any, queue: str) -> int:
    """Ready messages of ``queue`` by a passive declare; a queue never declared holds none."""
    channel = conn.channel()
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except conn.channel_errors:  # NOT_FOUND closes the channel: nothing was ever queued there
        return 0
    finally:
        with contextlib.suppress(Exception):
            channel.close()


def _amqp_queues(url: str) -> QueuesStatus:
    from kombu import Connection  # noqa: PLC0415

    with Connection(url, connect_timeout=_SOCKET_TIMEOUT_S) as conn:
        conn.ensure_connection(max_retries=1)
        lanes = tuple(
            LaneStatus(
                lane=lane.value,
                queue=queue,
                depth=_amqp_depth(conn, queue),
                unacked=None,
                oldest_age_s=None,
            )
            for lane, queue in LANE_QUEUES.items()
        )
    return QueuesStatus(lanes=lanes, unacked_total=None, oldest_unacked_age_s=None)


def _queues(url: str) -> QueuesStatus:
    from worker.broker import is_redis  # noqa: PLC0415 - fast import of the module

    return _redis_queues(url) if is_redis(url) else _amqp_queues(url)


def _workers(settings: Settings, url: str, timeout_s: float) -> WorkersStatus:
    from worker.app import create_app  # noqa: PLC0415 - Celery only when a broker is set

    app = create_app(settings, broker_url=url)
    try:
        inspect = app.control.inspect(timeout=timeout_s)
        pings: Mapping[str, Any] = inspect.ping() or {}
        active: Mapping[str, Any] = inspect.active() or {}
    finally:
        app.close()
    running = sum(len(tasks) for tasks in active.values() if isinstance(tasks, list))
    return WorkersStatus(online=len(pings), names=tuple(sorted(pings)), active_tasks=running)


def broker_status(settings: Settings | None, url: str | None, timeout_s: float) -> BrokerStatus:
    """Queues and workers from the broker at ``url`` (codes, not exceptions, when it fails)."""
    if url is None or settings is None:
        return BrokerStatus(
            configured=False, url=None, error="BROKER_NOT_CONFIGURED", queues=None, workers=None
        )
    shown = redact_url(url)
    try:
        queues = _queues(url)
    except Exception:  # noqa: BLE001 - any broker failure is reported as a code
        return BrokerStatus(
            configured=True, url=shown, error="BROKER_UNREACHABLE", queues=None, workers=None
        )
    try:
        workers = _workers(settings, url, timeout_s)
    except Exception:  # noqa: BLE001 - inspect failures must not hide the queue part
        return BrokerStatus(
            configured=True, url=shown, error="INSPECT_FAILED", queues=queues, workers=None
        )
    return BrokerStatus(configured=True, url=shown, error=None, queues=queues, workers=workers)


# --- store -------------------------------------------------------------------------------------


def _throughput(store: Store, now: datetime) -> Throughput:
    last_1m = store.count_evaluations(RecordScope(since=now - timedelta(minutes=1)))
    last_5m = store.count_evaluations(RecordScope(since=now - timedelta(minutes=5)))
    return Throughput(last_1m=last_1m, last_5m=last_5m, per_min_5m=last_5m / 5)


def backfill_statuses(
    checkpoints: Sequence[Checkpoint],
    counts: Mapping[str, tuple[int, int]],
    *,
    now: datetime,
    stale_after_s: float,
) -> tuple[BackfillStatus, ...]:
    """Progress of every backfill from its latest checkpoints (one per source)."""
    by_id: dict[str, list[Checkpoint]] = defaultdict(list)
    for checkpoint in checkpoints:
        by_id[checkpoint.backfill_id].append(checkpoint)
    return tuple(
        _backfill(bid, group, counts.get(bid, (0, 0)), now, stale_after_s)
        for bid, group in sorted(by_id.items())
    )


def _backfill(
    backfill_id: str,
    group: Sequence[Checkpoint],
    counts: tuple[int, int],
    now: datetime,
    stale_after_s: float,
) -> BackfillStatus:
    # A fingerprint checkpoint holds a file's identity, not its progress.
    files = [c for c in group if not c.source.startswith((COMPLETE_PREFIX, FINGERPRINT_PREFIX))]
    done = {c.source[len(COMPLETE_PREFIX) :] for c in group if c.source.startswith(COMPLETE_PREFIX)}
    last = max(c.recorded_at for c in group)
    age_s = max(0.0, (now - last).total_seconds())
    if files and all(c.source in done for c in files):
        # Read to the end, but snapshots failed (ERROR results, dead letters): not "complete".
        state = "failed" if counts[1] else "complete"
    else:
        state = "running" if age_s <= stale_after_s else "stalled"
    return BackfillStatus(
        backfill_id=backfill_id,
        state=state,
        files_started=len(files),
        files_complete=len(done),
        read=sum(c.position for c in files),
        enqueued=sum(c.enqueued for c in files),
        evaluated=counts[0],
        failed=counts[1],
        last_checkpoint_at=last,
        last_checkpoint_age_s=age_s,
    )


def decisions_from_counts(
    counts: Iterable[ResultCount],
    window_s: float,
    *,
    sampled_out: int | None,
    sampled_out_estimate: float,
) -> Decisions:
    """ "Why not scored" counts from per-(metric, status, reason) result counts."""
    by_status: Counter[str] = Counter()
    by_pair: Counter[tuple[str, str]] = Counter()
    for count in counts:
        by_status[count.status] += count.n
        by_pair[(count.status, count.reason)] += count.n
    timeouts = by_pair[("ERROR", "TIMEOUT")]
    missing = sum(by_pair[("SKIPPED", r)] for r in MISSING_EVIDENCE_REASONS)
    decisions = (
        Decision(code="scored", n=by_status["DECIDED"], known=True),
        _sampled_out(sampled_out),
        Decision(code="not_ready", n=None, known=False, note="producer-side; not recorded"),
        Decision(code="inconclusive", n=by_status["INCONCLUSIVE"], known=True),
        Decision(code="incomplete_trace", n=by_pair[("SKIPPED", "INCOMPLETE_TRACE")], known=True),
        Decision(code="missing_evidence", n=missing, known=True),
        Decision(code="evaluation_limit", n=by_pair[("SKIPPED", "EVALUATION_LIMIT")], known=True),
        Decision(code="timeout", n=timeouts, known=True),
        Decision(code="error", n=by_status["ERROR"] - timeouts, known=True),
    )
    return Decisions(
        window_s=window_s,
        results=sum(by_status.values()),
        decisions=decisions,
        sampled_out_estimate=sampled_out_estimate,
    )


def _sampled_out(n: int | None) -> Decision:
    if n is None:
        note = "producer-side; no sampling tally recorded in the window"
        return Decision(code="sampled_out", n=None, known=False, note=note)
    return Decision(code="sampled_out", n=n, known=True, note="units, from sampling tallies")


def _sampled_out_count(store: Store, since: datetime | None) -> int | None:
    """Units sampled out per the tallies that ended in the window; None when there are none."""
    rows = store.sampled_out_counts(since=since)
    return sum(r.sampled_out for r in rows) if rows else None


def store_status(
    store: Store, *, now: datetime, window_s: float, stale_after_s: float
) -> tuple[Throughput, dict[str, int], tuple[BackfillStatus, ...], Decisions]:
    """The store's part of the status."""
    since = now - timedelta(seconds=window_s) if window_s > 0 else None
    window = RecordScope(since=since) if since is not None else None
    checkpoints = store.latest_checkpoints()
    read_counts = store_counts(store)  # failed includes the backfill's dead-lettered snapshots
    ids = {c.backfill_id for c in checkpoints}
    counts = {bid: (read_counts(bid) if read_counts else None) or (0, 0) for bid in ids}
    backfills = backfill_statuses(checkpoints, counts, now=now, stale_after_s=stale_after_s)
    evaluations, weights = store.sampling_weight_sum(window)
    decisions = decisions_from_counts(
        store.result_counts(window),
        window_s,
        sampled_out=_sampled_out_count(store, since),
        sampled_out_estimate=max(0.0, weights - evaluations),
    )
    return _throughput(store, now), store.open_dead_letter_counts(), backfills, decisions


def collect_status(
    store: Store,
    settings: Settings | None,
    broker_url: str | None,
    *,
    window_s: float = 3600.0,
    stale_after_s: float = 300.0,
    inspect_timeout_s: float = 1.0,
    now: datetime | None = None,
) -> StatusReport:
    """Gather the whole status (broker part only when ``broker_url`` is given)."""
    at = now or datetime.now(UTC)
    throughput, dead, backfills, decisions = store_status(
        store, now=at, window_s=window_s, stale_after_s=stale_after_s
    )
    return StatusReport(
        generated_at=at,
        store=store.location,
        broker=broker_status(settings, broker_url, inspect_timeout_s),
        throughput=throughput,
        dead_letters=dead,
        dead_letters_open=sum(dead.values()),
        backfills=tuple(b for b in backfills if b.state != "complete"),
        backfills_complete=sum(1 for b in backfills if b.state == "complete"),
        decisions=decisions,
    )


# --- thresholds --------------------------------------------------------------------------------


class StatusThresholds(Frozen):
    """Limits given on the command line; None means "not checked"."""

    max_depth: int | None = None
    max_oldest_age_s: float | None = None
    max_dead_letters: int | None = None
    min_workers: int | None = None
    min_recent_5m: int | None = None

    def breaches(self, report: StatusReport) -> tuple[str, ...]:
        """A message per breached threshold (unknown inputs breach), in a fixed order."""
        found: list[str] = []
        found += self._queue_breaches(report.broker)
        found += self._worker_breaches(report.broker)
        if self.max_dead_letters is not None and report.dead_letters_open > self.max_dead_letters:
            found.append(f"dead letters {report.dead_letters_open} > {self.max_dead_letters}")
        recent = report.throughput.last_5m
        if self.min_recent_5m is not None and recent < self.min_recent_5m:
            found.append(f"evaluations in the last 5 min {recent} < {self.min_recent_5m}")
        return tuple(found)

    def _queue_breaches(self, broker: BrokerStatus) -> list[str]:
        if self.max_depth is None and self.max_oldest_age_s is None:
            return []
        if broker.queues is None:
            return [f"queues unknown ({broker.error})"]
        found = []
        for lane in broker.queues.lanes:
            if self.max_depth is not None and lane.depth > self.max_depth:
                found.append(f"depth[{lane.lane}] {lane.depth} > {self.max_depth}")
            age = lane.oldest_age_s
            if (
                self.max_oldest_age_s is not None
                and age is not None
                and age > self.max_oldest_age_s
            ):
                found.append(f"oldest age[{lane.lane}] {age:.1f} s > {self.max_oldest_age_s:g} s")
        return found

    def _worker_breaches(self, broker: BrokerStatus) -> list[str]:
        if self.min_workers is None:
            return []
        if broker.workers is None:
            return [f"workers unknown ({broker.error})"]
        if broker.workers.online < self.min_workers:
            return [f"workers online {broker.workers.online} < {self.min_workers}"]
        return []


# --- terminal ----------------------------------------------------------------------------------


def _age(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


def _broker_part(broker: BrokerStatus) -> list[RenderableType]:
    if not broker.configured:
        return [Text("broker: not configured (set EVALQ_BROKER_URL) — queues and workers unknown")]
    head = f"broker: {broker.url}" + (f"  [{broker.error}]" if broker.error else "")
    parts: list[RenderableType] = [Text(head)]
    if broker.queues is not None:
        table = Table("lane", "queue", "depth", "unacked", "oldest waiting", title="Queues")
        for lane in broker.queues.lanes:
            table.add_row(
                lane.lane, lane.queue, str(lane.depth), _num(lane.unacked), _age(lane.oldest_age_s)
            )
        parts.append(table)
    workers = broker.workers
    if workers is not None:
        names = ", ".join(workers.names) or "none"
        parts.append(
            Text(
                f"workers online: {workers.online} ({names}); active tasks: {workers.active_tasks}"
            )
        )
    return parts


def _store_part(report: StatusReport) -> list[RenderableType]:
    t = report.throughput
    lines = [
        f"store: {report.store}",
        f"throughput: {t.last_1m} evaluations in the last 1 min, {t.last_5m} in 5 min "
        f"({t.per_min_5m:.1f}/min)",
        f"open dead letters: {report.dead_letters_open}"
        + (
            f" ({', '.join(f'{k} {v}' for k, v in report.dead_letters.items())})"
            if report.dead_letters
            else ""
        ),
    ]
    parts: list[RenderableType] = [Text("\n".join(lines))]
    if report.backfills:
        parts.append(_backfill_table(report.backfills))
    parts.append(Text(f"backfills complete: {report.backfills_complete}", style="dim"))
    parts.append(_decisions_table(report.decisions))
    return parts


def _backfill_table(backfills: Sequence[BackfillStatus]) -> Table:
    columns = ("backfill", "state", "files", "read", "enqueued", "evaluated", "failed", "last")
    table = Table(*columns, title="Backfills")
    for b in backfills:
        table.add_row(
            b.backfill_id,
            b.state,
            f"{b.files_complete}/{b.files_started}",
            *(str(n) for n in (b.read, b.enqueued, b.evaluated, b.failed)),
            f"{b.last_checkpoint_age_s:.0f} s ago",
        )
    return table


def _decisions_table(decisions: Decisions) -> Table:
    window = "all time" if decisions.window_s <= 0 else f"last {decisions.window_s:g} s"
    table = Table("decision", "metric results", "note")
    table.title = f"Why not scored ({window}, {decisions.results} results)"
    for d in decisions.decisions:
        note = d.note
        if d.code == "sampled_out":
            note = f"{note}; weight estimate ≈ {decisions.sampled_out_estimate:.0f}"
        table.add_row(d.code, "unknown" if not d.known else str(d.n), note)
    return table


def render_status(report: StatusReport) -> RenderableType:
    """The human status (the default ``evalq status`` output)."""
    parts = [*_broker_part(report.broker), *_store_part(report)]
    for breach in report.breaches:
        parts.append(Text(f"THRESHOLD BREACHED: {breach}", style="bold red"))
    return Group(*parts)
