"""Prometheus metrics of the evalq worker, and a collector that reads queue depth from Redis.

Process model: ``evalq worker`` runs one consumer process per core under a supervisor, which
serves ``/metrics`` for all of them through prometheus_client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, a private directory set before the children import
prometheus_client); a worker that is a single process serves its own registry
(:func:`start_exporter`). One port per worker process tree, i.e. per container; the supervisor
calls :func:`mark_process_dead` for a child that exits. Worker-side metrics are counters and
histograms only, which aggregate across processes without a gauge mode to choose.
prometheus_client is thread-safe: the loop thread and the store threads record directly.

Each runtime samples its event loop's lag every 50 ms (``evalq_loop_lag_seconds``); an evaluation
that ends with TIMEOUT results while that lag's last window was above 0.1 s is counted in
``evalq_overload_timeouts_total`` as well (:attr:`~worker.runtime.FinishedEvaluation.overloaded`):
the worker's CPU, not the judge, is then the likely cause.

Judge HTTP responses are counted by the judge's endpoint itself (its ``on_response`` hook, wired
by the runtime to :meth:`WorkerMetrics.observe_http_status`): every attempt, retries included.

Queue depth is not a worker metric: every worker would report the same lists. One small process
runs :class:`QueueCollector` instead (``evalq queue-exporter --port 9809``), and
``evalq status`` can call :meth:`QueueInspector.snapshot` directly.

Label sets are bounded: lanes come from :class:`~producer.snapshot.Lane`, statuses from
:class:`~worker.evaluation.Status`, reasons from the known reason codes, metric ids from the
configured metric set (:func:`allow_metric_ids`); anything else is recorded as ``OTHER``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import threading
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import redis
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict
from redis.backoff import NoBackoff
from redis.retry import Retry

from producer.topology import ENQUEUED_AT_HEADER, LANE_QUEUES, Lane
from worker.broker import (
    PRIORITY_SEP,
    PRIORITY_STEPS,
    UNACKED_INDEX_KEY,
    UNACKED_KEY,
    queue_keys,
)
from worker.dead_letters import DeadLetterCode
from worker.evaluation import Reason, Report, Status
from worker.judges import (
    InvalidReply,
    JudgeError,
    JudgeRequest,
    JudgeResponse,
    check_async_judge,
    validate_response,
    validates_replies,
)

__all__ = [
    "DEAD_LETTER_REASONS",
    "DECISION_REASONS",
    "DEFAULT_EXPORTER_PORT",
    "DEFAULT_QUEUE_EXPORTER_PORT",
    "EVALUATION_OUTCOMES",
    "JUDGE_STATUSES",
    "KNOWN_REASONS",
    "OTHER",
    "Exporter",
    "LaneStats",
    "MeteredJudge",
    "QueueCollector",
    "QueueInspector",
    "QueueStats",
    "WorkerMetrics",
    "allow_metric_ids",
    "allow_reasons",
    "default_metrics",
    "judge_status",
    "main",
    "mark_process_dead",
    "observe_dead_letter",
    "observe_duplicate",
    "observe_judge_call",
    "observe_loop_lag",
    "observe_queue_wait",
    "observe_report",
    "observe_reports",
    "serve_queue_exporter",
    "start_exporter",
]

OTHER = "OTHER"
"""The label value for anything outside a bounded set."""
DEFAULT_EXPORTER_PORT = 9808
DEFAULT_QUEUE_EXPORTER_PORT = 9809
MAX_METRIC_IDS = 64
"""Cap on distinct metric-id label values, whatever a misconfigured worker allows."""

DECISION_REASONS = frozenset(
    {"SAMPLED_OUT", "NOT_READY", "PENDING_OUTCOME", "DUPLICATE", "UNKNOWN_METRIC_SET"}
)
"""Decision codes beyond the engine's (why a trace was not scored, issue 5)."""
DEAD_LETTER_REASONS = frozenset(code.value for code in DeadLetterCode)
"""Dead-letter codes (:class:`worker.dead_letters.DeadLetterCode`)."""
KNOWN_REASONS = (
    frozenset(
        value for name, value in vars(Reason).items() if name.isupper() and isinstance(value, str)
    )
    | DECISION_REASONS
    | DEAD_LETTER_REASONS
)
JUDGE_STATUSES = (
    "ok",
    "invalid",
    "timeout",
    "http_429",
    "http_4xx",
    "http_5xx",
    "transport_error",
    "backend_error",
)
EVALUATION_OUTCOMES = ("ok", "error", "timeout", "duplicate")
_LANES = frozenset(lane.value for lane in Lane)
_STATUSES = frozenset(status.value for status in Status)
_HTTP_CLASSES = ("2xx", "3xx", "4xx", "429", "5xx")
_LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
_LAG_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS_S = (0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)


_JUDGE_STATUSES = frozenset(JUDGE_STATUSES)


def _bounded(value: str, allowed: frozenset[str]) -> str:
    return value if value in allowed else OTHER


class WorkerMetrics:
    """The worker's counters and histograms on one registry, with bounded label values."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._metric_ids: frozenset[str] = frozenset()
        self._reasons = KNOWN_REASONS
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._define_evaluation_metrics(registry)
        self._define_judge_metrics(registry)
        self._define_event_metrics(registry)

    def _define_evaluation_metrics(self, registry: CollectorRegistry) -> None:
        self.evaluations = Counter(
            "evalq_evaluations",
            "Evaluations finished, by lane and outcome (ok|error|timeout|duplicate).",
            ("lane", "outcome"),
            registry=registry,
        )
        self.evaluation_duration = Histogram(
            "evalq_evaluation_duration_seconds",
            "Wall time of one evaluation (engine report elapsed_s).",
            ("lane",),
            buckets=_LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.metric_results = Counter(
            "evalq_metric_results",
            "Metric results by metric id, status and reason code.",
            ("metric", "status", "reason"),
            registry=registry,
        )
        self.budget_timeouts = Counter(
            "evalq_budget_timeouts",
            "Metric results marked TIMEOUT because the evaluation budget ran out.",
            ("lane",),
            registry=registry,
        )
        self.overload_timeouts = Counter(
            "evalq_overload_timeouts",
            "Evaluations with TIMEOUT results that ended while their process's event loop lagged "
            "above 0.1 s: the worker's own CPU, not the judge, is the likely cause.",
            ("lane",),
            registry=registry,
        )
        self.loop_lag = Histogram(
            "evalq_loop_lag_seconds",
            "How late a worker process's event loop runs a 50 ms timer (sampled every 50 ms); "
            "above 0.1 s the process holds evaluations back as messages.",
            buckets=_LAG_BUCKETS_S,
            registry=registry,
        )
        self.dead_letters = Counter(
            "evalq_dead_letters",
            "Messages written to the dead-letter store, by lane and reason code.",
            ("lane", "reason"),
            registry=registry,
        )
        self.queue_wait = Histogram(
            "evalq_queue_wait_seconds",
            "Time from publish to the start of processing (from the enqueue header).",
            ("lane",),
            buckets=_WAIT_BUCKETS_S,
            registry=registry,
        )

    def _define_judge_metrics(self, registry: CollectorRegistry) -> None:
        self.judge_requests = Counter(
            "evalq_judge_requests",
            "Judge requests (one per packed request, retries inside), by final status.",
            ("status",),
            registry=registry,
        )
        self.judge_latency = Histogram(
            "evalq_judge_latency_seconds",
            "Latency of one judge request, retries included.",
            buckets=_LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.judge_http_responses = Counter(
            "evalq_judge_http_responses",
            "Every HTTP response from the judge backend (retried attempts too), by status class.",
            ("code",),
            registry=registry,
        )
        self.judge_tokens = Counter(
            "evalq_judge_tokens",
            "Tokens reported by the judge, by direction (input|output).",
            ("direction",),
            registry=registry,
        )
        self.judge_usage_unknown = Counter(
            "evalq_judge_usage_unknown",
            "Judge requests whose usage is unknown (no response, or usage missing).",
            registry=registry,
        )

    def _define_event_metrics(self, registry: CollectorRegistry) -> None:
        self.otel_events_exported = Counter(
            "evalq_otel_events_exported",
            "gen_ai.evaluation.result events the OTLP receiver accepted (EVALQ_OTLP_ENDPOINT).",
            registry=registry,
        )
        self.otel_events_dropped = Counter(
            "evalq_otel_events_dropped",
            "gen_ai.evaluation.result events dropped, by reason code (worker.otel_export).",
            ("reason",),
            registry=registry,
        )

    # -- label policy ---------------------------------------------------------------------------

    def allow_metric_ids(self, metric_ids: Iterable[str]) -> None:
        """Add configured metric ids to the label set (at most ``MAX_METRIC_IDS`` in all)."""
        merged = self._metric_ids | frozenset(metric_ids)
        if len(merged) > MAX_METRIC_IDS:
            raise ValueError(f"at most {MAX_METRIC_IDS} metric ids can be labels")
        self._metric_ids = merged

    def allow_reasons(self, codes: Iterable[str]) -> None:
        """Add reason codes (e.g. dead-letter codes) to the known list."""
        self._reasons = self._reasons | frozenset(codes)

    def metric_label(self, metric_id: str) -> str:
        """``metric_id`` if configured, else ``OTHER``."""
        return _bounded(metric_id, self._metric_ids)

    def reason_label(self, reason: str) -> str:
        """``reason`` if it is a known code, else ``OTHER``."""
        return _bounded(reason, self._reasons)

    # -- observations ---------------------------------------------------------------------------

    def observe_report(self, lane: str, report: Report) -> None:
        """Record one finished evaluation: outcome, duration, every result, tokens."""
        self.observe_reports(lane, (report,))

    def observe_reports(
        self, lane: str, reports: Iterable[Report], *, overloaded: bool = False
    ) -> None:
        """Record finished evaluations of one lane (a message's): the same counts as one
        :meth:`observe_report` each, with one increment per label set instead of per result.
        ``overloaded``: they ended while the process's loop lagged (their TIMEOUTs are counted
        as the worker's own as well).

        Measured: per-result ``labels(...).inc()`` calls were ~7% of a busy worker's CPU.
        """
        lane = _bounded(lane, _LANES)
        outcomes: Tally[str] = Tally()
        results: Tally[tuple[str, str, str]] = Tally()
        tokens = [0, 0]
        unknown = 0
        duration = self._child(self.evaluation_duration, lane)
        for report in reports:
            outcomes[_outcome(report)] += 1
            duration.observe(report.elapsed_s)
            for entry in report.results:
                result = entry.result
                results[(entry.id, str(result.status), result.reason)] += 1
            known = [item.usage for item in report.usage if item.usage is not None]
            tokens[0] += sum(u.input_tokens for u in known)
            tokens[1] += sum(u.output_tokens for u in known)
            unknown += max(0, report.requests - len(known))
        for outcome, count in outcomes.items():
            self._child(self.evaluations, lane, outcome).inc(count)
        if overloaded and outcomes["timeout"]:
            self._child(self.overload_timeouts, lane).inc(outcomes["timeout"])
        self._observe_results(lane, results)
        self._child(self.judge_tokens, "input").inc(tokens[0])
        self._child(self.judge_tokens, "output").inc(tokens[1])
        self.judge_usage_unknown.inc(unknown)

    def _observe_results(self, lane: str, results: Tally[tuple[str, str, str]]) -> None:
        for (metric_id, status, reason), count in results.items():
            labels = (self.metric_label(metric_id), _bounded(status, _STATUSES))
            self._child(self.metric_results, *labels, self.reason_label(reason)).inc(count)
            if reason == Reason.TIMEOUT:
                self._child(self.budget_timeouts, lane).inc(count)

    def _child(self, family: Any, *labels: str) -> Any:
        """``family.labels(*labels)``, cached: label values are bounded, so is this cache."""
        key = (id(family), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def observe_duplicate(self, lane: str) -> None:
        """A redelivered/duplicate message found its evaluation already recorded."""
        self.evaluations.labels(_bounded(lane, _LANES), "duplicate").inc()

    def observe_dead_letter(self, reason: str, lane: str = OTHER) -> None:
        """A message went to the dead-letter store with ``reason``."""
        self.dead_letters.labels(_bounded(lane, _LANES), self.reason_label(reason)).inc()

    def observe_judge_call(self, status: str, latency_s: float) -> None:
        """One judge request finished with ``status`` (see ``JUDGE_STATUSES``)."""
        self._child(self.judge_requests, _bounded(status, _JUDGE_STATUSES)).inc()
        if math.isfinite(latency_s) and latency_s >= 0:
            self.judge_latency.observe(latency_s)

    def observe_http_status(self, status_code: int) -> None:
        """One HTTP response from the judge backend (each retried attempt counts)."""
        self._child(self.judge_http_responses, _http_class(status_code)).inc()

    def observe_loop_lag(self, lag_s: float) -> None:
        """One sample of how late the process's event loop ran its timer."""
        if math.isfinite(lag_s):
            self.loop_lag.observe(max(0.0, lag_s))

    def observe_queue_wait(self, lane: str, wait_s: float) -> None:
        """Time a message waited between publish and the start of its processing."""
        if math.isfinite(wait_s):
            self.queue_wait.labels(_bounded(lane, _LANES)).observe(max(0.0, wait_s))

    def observe_otel_exported(self, count: int) -> None:
        """``count`` evaluation events were accepted by the OTLP receiver."""
        self.otel_events_exported.inc(count)

    def observe_otel_dropped(self, reason: str, count: int) -> None:
        """``count`` evaluation events were dropped with ``reason`` (a ``DropReason`` code)."""
        self._child(self.otel_events_dropped, self.reason_label(reason)).inc(count)


def _outcome(report: Report) -> str:
    errors = {e.result.reason for e in report.results if e.result.status is Status.ERROR}
    if Reason.TIMEOUT in errors:
        return "timeout"
    return "error" if errors else "ok"


def _http_class(status_code: int) -> str:
    if status_code == 429:
        return "429"
    label = f"{status_code // 100}xx"
    return label if label in _HTTP_CLASSES else OTHER


_default_lock = threading.Lock()
_default: WorkerMetrics | None = None


def default_metrics() -> WorkerMetrics:
    """The process-wide instance on prometheus_client's default registry (created once)."""
    global _default  # noqa: PLW0603 - one registry per process is prometheus_client's model
    with _default_lock:
        if _default is None:
            _default = WorkerMetrics(REGISTRY)
        return _default


def allow_metric_ids(metric_ids: Iterable[str]) -> None:
    """Let the configured metric ids be label values (call once at worker start)."""
    default_metrics().allow_metric_ids(metric_ids)


def allow_reasons(codes: Iterable[str]) -> None:
    """Add reason codes (dead-letter codes, decision codes) to the known list."""
    default_metrics().allow_reasons(codes)


def observe_reports(lane: str, reports: Iterable[Report], *, overloaded: bool = False) -> None:
    """:meth:`WorkerMetrics.observe_reports` on the process-wide instance."""
    default_metrics().observe_reports(lane, reports, overloaded=overloaded)


def observe_report(lane: str, report: Report) -> None:
    """Record one finished evaluation on the default registry."""
    default_metrics().observe_report(lane, report)


def observe_duplicate(lane: str) -> None:
    """Record a duplicate delivery that wrote nothing new."""
    default_metrics().observe_duplicate(lane)


def observe_dead_letter(reason: str, lane: str = OTHER) -> None:
    """Record one dead letter."""
    default_metrics().observe_dead_letter(reason, lane)


def observe_judge_call(status: str, latency_s: float) -> None:
    """Record one judge request."""
    default_metrics().observe_judge_call(status, latency_s)


def observe_loop_lag(lag_s: float) -> None:
    """Record one loop-lag sample on the default registry."""
    default_metrics().observe_loop_lag(lag_s)


def observe_queue_wait(lane: str, wait_s: float) -> None:
    """Record the queue wait of one message."""
    default_metrics().observe_queue_wait(lane, wait_s)


# -- judge instrumentation -----------------------------------------------------------------------


def judge_status(error: BaseException | None) -> str:
    """The ``JUDGE_STATUSES`` value for a judge call that raised ``error`` (``None``: ok)."""
    if error is None:
        return "ok"
    if isinstance(error, InvalidReply):
        return "invalid"
    if isinstance(error, TimeoutError | asyncio.CancelledError):
        return "timeout"
    if isinstance(error, JudgeError):
        return _judge_error_status(error.status)
    return "backend_error"


def _judge_error_status(status: int | None) -> str:
    if status is None:
        return "transport_error"
    if status == 429:
        return "http_429"
    return "http_5xx" if status >= 500 else "http_4xx"


class MeteredJudge:
    """A judge wrapper recording status and latency of every request; the engine stays pure.

    A reply that fails strict validation counts as ``invalid`` (the engine makes the same call).
    Cancellation by the evaluation deadline counts as ``timeout`` and is re-raised unchanged.
    """

    def __init__(
        self,
        judge: Callable[[JudgeRequest], Awaitable[JudgeResponse]],
        metrics: WorkerMetrics | None = None,
        on_answer: Callable[[float], None] | None = None,
    ) -> None:
        check_async_judge(judge)  # a synchronous judge would block the loop past every budget
        self._judge = judge
        self._metrics = metrics or default_metrics()
        self._on_answer = on_answer  # round trip of every valid answer (the in-flight limit)
        # The wire judges validate every reply (InvalidReply otherwise); validating it again
        # here was a visible share of a busy worker's CPU. Other judges are checked.
        self._validates = validates_replies(judge)

    @property
    def validates_replies(self) -> bool:
        """The wrapped judge's promise (see :class:`~worker.judges.Judge`), passed on."""
        return self._validates

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        started = time.monotonic()
        status = "backend_error"
        try:
            response = await self._judge(request)
            status = "ok" if self._validates else _validity(request, response)
        except BaseException as exc:
            status = judge_status(exc)
            raise
        finally:
            round_trip_s = time.monotonic() - started
            self._metrics.observe_judge_call(status, round_trip_s)
        if self._on_answer is not None and status == "ok":
            self._on_answer(round_trip_s)
        return response

    async def aclose(self) -> None:
        """Close the wrapped judge's HTTP client, if it has one."""
        aclose = getattr(self._judge, "aclose", None)
        if aclose is not None:
            await aclose()


def _validity(request: JudgeRequest, response: object) -> str:
    if not isinstance(response, JudgeResponse):
        return "invalid"
    try:
        validate_response(request, response)
    except ValueError:
        return "invalid"
    return "ok"


# -- exporter -----------------------------------------------------------------------------------


class Exporter:
    """A running ``/metrics`` HTTP server; :meth:`stop` shuts it down."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The bound port (useful with ``port=0``)."""
        return int(self._server.server_port)

    def stop(self) -> None:
        """Stop serving and join the server thread (bounded)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _serving_registry() -> CollectorRegistry:
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


def start_exporter(
    port: int = DEFAULT_EXPORTER_PORT,
    addr: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
) -> Exporter:
    """Serve ``registry`` (default: this process, or all children in multiprocess mode)."""
    server, thread = start_http_server(port, addr=addr, registry=registry or _serving_registry())
    return Exporter(server, thread)


def mark_process_dead(pid: int) -> None:
    """Multiprocess mode only: drop a dead pool child's live gauges (no-op otherwise)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


# -- queue depth and age ------------------------------------------------------------------------


class LaneStats(BaseModel):
    """One lane's queue: ready messages, delivered-but-unacked ones, age of the oldest ready one.

    ``oldest_age_s`` is ``None`` when the queue is empty or its tail carries no enqueue header and
    this inspector has not seen it before.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lane: str
    queue: str
    depth: int
    unacked: int
    oldest_age_s: float | None


class QueueStats(BaseModel):
    """Every lane at one instant, the oldest unacked delivery (a stuck-worker signal), memory.

    ``maxmemory_bytes`` is 0 when Redis has no limit (then nothing stops it growing but the host).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lanes: tuple[LaneStats, ...]
    unacked_total: int
    oldest_unacked_age_s: float | None
    used_memory_bytes: int
    maxmemory_bytes: int


class QueueInspector:
    """Reads kombu's Redis layout: ``LLEN`` over priority sub-lists, the ``unacked`` hash.

    kombu publishes with ``LPUSH`` and consumes with ``BRPOP``, so the tail (``LINDEX -1``) of the
    lowest priority step in use is the next (oldest) message.
    """

    def __init__(
        self,
        client: redis.Redis,
        queues: Mapping[str, str] | None = None,
        *,
        priority_steps: Sequence[int] = PRIORITY_STEPS,
        sep: str = PRIORITY_SEP,
        keyprefix: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._queues = dict(queues or {lane.value: q for lane, q in LANE_QUEUES.items()})
        self._steps = tuple(priority_steps)
        self._sep = sep
        self._prefix = keyprefix
        self._clock = clock
        self._first_seen: dict[str, tuple[str, float]] = {}

    def _keys(self, queue: str) -> list[str]:
        return list(queue_keys(queue, self._prefix, self._steps, self._sep))

    def snapshot(self) -> QueueStats:
        """Depth, unacked count and oldest age per lane (raises ``redis.RedisError`` if down)."""
        now = self._clock()
        unacked = self._unacked_by_queue()
        lanes = tuple(
            self._lane(lane, q, unacked.get(q, 0), now) for lane, q in self._queues.items()
        )
        oldest = self._client.zrange(self._prefix + UNACKED_INDEX_KEY, 0, 0, withscores=True)
        oldest_age = max(0.0, now - float(oldest[0][1])) if oldest else None
        memory = self._client.info("memory")
        return QueueStats(
            lanes=lanes,
            unacked_total=sum(unacked.values()),
            oldest_unacked_age_s=oldest_age,
            used_memory_bytes=int(memory.get("used_memory", 0)),
            maxmemory_bytes=int(memory.get("maxmemory", 0)),
        )

    def _lane(self, lane: str, queue: str, unacked: int, now: float) -> LaneStats:
        keys = self._keys(queue)
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        for key in keys:
            pipe.lindex(key, -1)
        replies = pipe.execute()
        depths, tails = replies[: len(keys)], replies[len(keys) :]
        tail = next((t for t in tails if t is not None), None)
        age = None if tail is None else self._age(lane, tail, now)
        return LaneStats(
            lane=lane, queue=queue, depth=sum(depths), unacked=unacked, oldest_age_s=age
        )

    def _age(self, lane: str, raw: bytes, now: float) -> float | None:
        headers, tag = _headers_and_tag(raw)
        stamp = headers.get(ENQUEUED_AT_HEADER)
        if isinstance(stamp, int | float) and math.isfinite(stamp):
            return max(0.0, now - float(stamp))
        # No header: age since this inspector first saw the same message at the tail (lower bound).
        seen = self._first_seen.get(lane)
        if seen is not None and seen[0] == tag:
            return max(0.0, now - seen[1])
        self._first_seen[lane] = (tag, now)
        return None

    def _unacked_by_queue(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _tag, raw in self._client.hscan_iter(self._prefix + UNACKED_KEY, count=500):
            queue = _unacked_routing_key(raw)
            counts[queue] = counts.get(queue, 0) + 1
        return counts


def _headers_and_tag(raw: bytes) -> tuple[dict[str, Any], str]:
    try:
        message = json.loads(raw)
        headers = message.get("headers") or {}
        tag = str((message.get("properties") or {}).get("delivery_tag", ""))
    except (ValueError, AttributeError):
        return {}, ""
    return (headers if isinstance(headers, dict) else {}), tag


def _unacked_routing_key(raw: bytes) -> str:
    # kombu stores [message, exchange, routing_key]; the default exchange routes by queue name.
    try:
        _message, _exchange, routing_key = json.loads(raw)
    except (ValueError, TypeError):
        return OTHER
    return str(routing_key)


class QueueCollector(Collector):
    """A custom collector: ``evalq_queue_*`` gauges from one :class:`QueueInspector` per scrape."""

    def __init__(self, inspector: QueueInspector) -> None:
        self._inspector = inspector

    def collect(self) -> Iterator[Metric]:
        """Yield the queue gauges, or only ``evalq_queue_up 0`` when Redis cannot be read."""
        up = GaugeMetricFamily("evalq_queue_up", "1 if the broker could be read at this scrape.")
        try:
            stats = self._inspector.snapshot()
        except redis.RedisError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _queue_families(stats)


def _queue_families(stats: QueueStats) -> Iterator[Metric]:
    depth = GaugeMetricFamily(
        "evalq_queue_depth", "Ready messages per lane (all priority sub-lists).", labels=["lane"]
    )
    unacked = GaugeMetricFamily(
        "evalq_queue_unacked", "Delivered, not yet acknowledged messages per lane.", labels=["lane"]
    )
    age = GaugeMetricFamily(
        "evalq_queue_oldest_age_seconds",
        "Age of the oldest ready message per lane (0 when empty).",
        labels=["lane"],
    )
    for lane in stats.lanes:
        depth.add_metric([lane.lane], lane.depth)
        unacked.add_metric([lane.lane], lane.unacked)
        if lane.depth == 0 or lane.oldest_age_s is not None:
            age.add_metric([lane.lane], lane.oldest_age_s or 0.0)
    oldest = GaugeMetricFamily(
        "evalq_queue_oldest_unacked_age_seconds",
        "Age of the oldest unacknowledged delivery, all lanes (0 when none).",
    )
    oldest.add_metric([], stats.oldest_unacked_age_s or 0.0)
    used = GaugeMetricFamily("evalq_redis_used_memory_bytes", "Broker Redis used_memory.")
    used.add_metric([], stats.used_memory_bytes)
    limit = GaugeMetricFamily("evalq_redis_maxmemory_bytes", "Broker Redis maxmemory (0: none).")
    limit.add_metric([], stats.maxmemory_bytes)
    yield from (depth, unacked, age, oldest, used, limit)


# -- command line (the queue exporter service) -------------------------------------------------


def serve_queue_exporter(
    broker_url: str,
    *,
    addr: str = "127.0.0.1",
    port: int = DEFAULT_QUEUE_EXPORTER_PORT,
    keyprefix: str = "",
) -> int:
    """Serve the ``evalq_queue_*`` gauges of the Redis at ``broker_url`` until SIGTERM/SIGINT."""
    # One quick retry: a scrape against a down broker should report `evalq_queue_up 0` within
    # Prometheus's scrape timeout, not sit in redis-py's default backoff.
    client = redis.Redis.from_url(
        broker_url, socket_timeout=5, socket_connect_timeout=5, retry=Retry(NoBackoff(), 1)
    )
    registry = CollectorRegistry()
    registry.register(QueueCollector(QueueInspector(client, keyprefix=keyprefix)))
    exporter = start_exporter(port, addr=addr, registry=registry)
    print(f"evalq queue exporter on {addr}:{exporter.port}", flush=True)  # noqa: T201
    stop = threading.Event()
    # As PID 1 in a container SIGTERM has no default action: handle it, or `stop` waits for SIGKILL.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    exporter.stop()
    client.close()
    return 0


def _serve_queues(args: argparse.Namespace) -> int:
    return serve_queue_exporter(
        args.broker_url, addr=args.addr, port=args.port, keyprefix=args.keyprefix
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m worker.metrics", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    queues = commands.add_parser("queues", help="serve evalq_queue_* gauges read from Redis")
    queues.add_argument("--broker-url", default=os.environ.get("EVALQ_BROKER_URL"))
    queues.add_argument("--port", type=int, default=DEFAULT_QUEUE_EXPORTER_PORT)
    queues.add_argument("--addr", default="127.0.0.1")
    queues.add_argument("--keyprefix", default="", help="kombu global_keyprefix, if any")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``queues``: serve the queue collector until SIGTERM/SIGINT."""
    args = _parser().parse_args(argv)
    if not args.broker_url:
        _parser().error("EVALQ_BROKER_URL (or --broker-url) is required")
    return _serve_queues(args)


if __name__ == "__main__":
    raise SystemExit(main())
