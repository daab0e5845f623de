"""Send ``gen_ai.evaluation.result`` events to an OTLP/HTTP receiver (``EVALQ_OTLP_ENDPOINT``).

Needs the ``otel`` extra (``pip install 'evalq[otel]'``: opentelemetry-sdk and
opentelemetry-exporter-otlp-proto-http); a worker started with the endpoint set and the extra
missing stops at start, naming it (:func:`require_extra`).

One :class:`ResultExporter` per worker process, built after the process started (the SDK's
export thread does not survive a fork) and shared by its runtimes. The handler calls
:meth:`ResultExporter.emit` after an evaluation's record committed, on the event loop:
``emit`` only appends to the SDK's bounded queue (``BatchLogRecordProcessor``), never waits
for the network and never raises. The SDK's export thread sends batches; the standard
``OTEL_EXPORTER_OTLP_LOGS_*``/``OTEL_EXPORTER_OTLP_*`` variables set its headers, timeout,
compression and certificates, ``OTEL_BLRP_*`` the queue and batch sizes and the schedule
delay, ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` the resource.

An event never blocks or loses a record: the record is committed before its events exist. An
event that cannot be delivered is dropped and counted, by reason (:class:`DropReason`), in
``evalq_otel_events_dropped_total`` beside ``evalq_otel_events_exported_total``:

- ``QUEUE_FULL``: the queue held ``OTEL_BLRP_MAX_QUEUE_SIZE`` events (a slow or dead receiver).
  The exporter admits an event only while its own count of queued events is under the limit, so
  the SDK's queue never overflows (it would drop its oldest event silently);
- ``EXPORT_FAILED``: the receiver refused a batch or could not be reached within the export
  timeout (the SDK's retries included);
- ``SHUTDOWN``: still queued when the process stopped and the bounded final flush
  (:data:`SHUTDOWN_WAIT_S`) ended;
- ``INTERNAL_ERROR``: the SDK raised while taking the event.

The SDK's own log lines (which quote exception text and the endpoint) are silenced; the
exporter logs one line per reason code instead, at most every :data:`LOG_EVERY_S`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import urlsplit, urlunsplit

from worker.metrics import WorkerMetrics, default_metrics
from worker.otel_events import EVENT_NAME, ResultEvent
from worker.settings import ConfigError

if TYPE_CHECKING:
    from opentelemetry._logs import Logger
    from opentelemetry.context import Context
    from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

__all__ = [
    "DEFAULT_MAX_EXPORT_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_SIZE",
    "EXTRA_MODULES",
    "LOGS_PATH",
    "LOG_EVERY_S",
    "SERVICE_NAME",
    "SHUTDOWN_WAIT_S",
    "DropReason",
    "ResultExporter",
    "logs_url",
    "require_extra",
]

_log = logging.getLogger(__name__)

EXTRA_MODULES: Final = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
"""What the ``otel`` extra brings: the SDK and the OTLP/HTTP exporter."""
LOGS_PATH: Final = "/v1/logs"
"""The OTLP/HTTP logs path, appended to the endpoint unless it already ends with it."""
DEFAULT_MAX_QUEUE_SIZE: Final = 2048
"""Events queued at most (the SDK's default; ``OTEL_BLRP_MAX_QUEUE_SIZE`` overrides)."""
DEFAULT_MAX_EXPORT_BATCH_SIZE: Final = 512
"""Events per export request at most (``OTEL_BLRP_MAX_EXPORT_BATCH_SIZE``; at most the queue)."""
SHUTDOWN_WAIT_S: Final = 5.0
"""How long a stopping worker waits for its queued events to be sent before dropping them."""
LOG_EVERY_S: Final = 60.0
"""At most one log line per drop reason this often."""
SERVICE_NAME: Final = "evalq-worker"
"""The resource's ``service.name`` unless ``OTEL_SERVICE_NAME`` (or the resource attributes)
set one."""
_SCOPE: Final = "evalq"


class DropReason(StrEnum):
    """Why an event was not delivered (label of ``evalq_otel_events_dropped_total``)."""

    QUEUE_FULL = "QUEUE_FULL"
    EXPORT_FAILED = "EXPORT_FAILED"
    SHUTDOWN = "SHUTDOWN"
    INTERNAL_ERROR = "INTERNAL_ERROR"


def require_extra() -> None:
    """:class:`ConfigError` naming ``EVALQ_OTLP_ENDPOINT`` and the extra when it is missing."""
    missing = [name for name in EXTRA_MODULES if not _importable(name)]
    if missing:
        raise ConfigError(
            "EVALQ_OTLP_ENDPOINT: needs the otel extra: pip install 'evalq[otel]' "
            f"({', '.join(missing)} not installed) (OTEL_EXTRA_MISSING)"
        )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def logs_url(endpoint: str) -> str:
    """The URL events are posted to: ``endpoint`` + ``/v1/logs`` unless it ends with that."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    if not path.endswith(LOGS_PATH):
        path += LOGS_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def _env_size(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name}: expected a positive integer")
    return int(raw)


class _Ledger:
    """Events admitted to the SDK's queue and not yet handed to an export: the bound's count."""

    def __init__(self, limit: int, metrics: WorkerMetrics) -> None:
        self.limit = limit
        self.queued = 0
        self.closed = False
        self._metrics = metrics
        self._lock = threading.Lock()
        self._logged_at: dict[DropReason, float] = {}

    def admit(self) -> DropReason | None:
        with self._lock:
            if self.closed:
                return DropReason.SHUTDOWN
            if self.queued >= self.limit:
                return DropReason.QUEUE_FULL
            self.queued += 1
            return None

    def taken(self, count: int) -> None:
        with self._lock:
            self.queued = max(0, self.queued - count)

    def close(self) -> int:
        """Admit nothing more; the events still queued (dropped from now on)."""
        with self._lock:
            self.closed = True
            left, self.queued = self.queued, 0
            return left

    def exported(self, count: int) -> None:
        self._metrics.observe_otel_exported(count)

    def dropped(self, reason: DropReason, count: int) -> None:
        if count <= 0:
            return
        self._metrics.observe_otel_dropped(reason.value, count)
        now = time.monotonic()
        with self._lock:
            last = self._logged_at.get(reason)
            if last is not None and now - last < LOG_EVERY_S:
                return
            self._logged_at[reason] = now
        _log.warning("evaluation events dropped: %s (%d)", reason.value, count)


class _CountingExporter:
    """The OTLP exporter, counting what each batch became; never raises into the SDK."""

    def __init__(self, inner: LogRecordExporter, ledger: _Ledger, failure: Any) -> None:
        self._inner = inner
        self._ledger = ledger
        self._failure = failure  # LogRecordExportResult.FAILURE (the SDK is imported lazily)

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        count = len(batch)
        self._ledger.taken(count)
        if self._ledger.closed:  # abandoned by a shutdown that gave up: counted as SHUTDOWN
            return cast("LogRecordExportResult", self._failure)
        try:
            result = self._inner.export(batch)
        except Exception:  # noqa: BLE001 - counted; the SDK's thread must go on
            self._ledger.dropped(DropReason.EXPORT_FAILED, count)
            return cast("LogRecordExportResult", self._failure)
        if result == self._failure:
            self._ledger.dropped(DropReason.EXPORT_FAILED, count)
        else:
            self._ledger.exported(count)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK


def _silence_sdk_logs() -> None:
    """The SDK logs exception text and endpoints; the exporter logs reason codes instead."""
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL + 1)


class ResultExporter:
    """The evaluation events of one worker process (see the module docstring)."""

    def __init__(self, endpoint: str, *, metrics: WorkerMetrics | None = None) -> None:
        require_extra()
        limit = _env_size("OTEL_BLRP_MAX_QUEUE_SIZE", DEFAULT_MAX_QUEUE_SIZE)
        wanted = _env_size("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", DEFAULT_MAX_EXPORT_BATCH_SIZE)
        batch = min(limit, wanted)
        self.url = logs_url(endpoint)
        counters = metrics or default_metrics()
        counters.allow_reasons(reason.value for reason in DropReason)
        self._ledger = _Ledger(limit, counters)
        _silence_sdk_logs()
        self._provider, self._logger = _pipeline(self.url, self._ledger, batch)
        self._contexts = _context_factory()

    @property
    def shown_url(self) -> str:
        """The logs URL without credentials or query (for a log line)."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))

    @property
    def max_queue_size(self) -> int:
        """Events queued at most before new ones are dropped (``QUEUE_FULL``)."""
        return self._ledger.limit

    @property
    def queued(self) -> int:
        """Events waiting to be handed to an export now."""
        return self._ledger.queued

    def emit(self, events: Iterable[ResultEvent]) -> None:
        """Queue ``events`` for export; never blocks on the network, never raises."""
        for event in events:
            refused = self._ledger.admit()
            if refused is not None:
                self._ledger.dropped(refused, 1)
                continue
            try:
                self._emit(event)
            except Exception:  # noqa: BLE001 - an event must never fail its evaluation
                self._ledger.taken(1)
                self._ledger.dropped(DropReason.INTERNAL_ERROR, 1)

    def _emit(self, event: ResultEvent) -> None:
        context = None
        if event.trace_id is not None and event.span_id is not None:
            context = self._contexts(int(event.trace_id, 16), int(event.span_id, 16))
        self._logger.emit(
            timestamp=time.time_ns(),
            context=context,
            severity_number=_info_severity(),
            attributes=dict(event.attributes),
            event_name=EVENT_NAME,
        )

    def shutdown(self, timeout_s: float = SHUTDOWN_WAIT_S) -> None:
        """Send what is queued, waiting at most ``timeout_s``; count the rest as ``SHUTDOWN``."""
        done = threading.Event()

        def flush_and_stop() -> None:
            try:
                self._provider.shutdown()
            except Exception:  # noqa: BLE001 - shutdown goes on; whatever is left is counted
                _log.warning("evaluation events: exporter shutdown failed (%s)", "INTERNAL_ERROR")
            finally:
                done.set()

        threading.Thread(target=flush_and_stop, name="evalq-otel-stop", daemon=True).start()
        done.wait(timeout_s)
        self._ledger.dropped(DropReason.SHUTDOWN, self._ledger.close())


def _info_severity() -> Any:
    from opentelemetry._logs import SeverityNumber  # noqa: PLC0415 - the otel extra, lazily

    return SeverityNumber.INFO


def _context_factory() -> Callable[[int, int], Context]:
    """``(trace_id, span_id) -> Context`` holding that (remote, sampled) span as the parent."""
    from opentelemetry import trace  # noqa: PLC0415 - the otel extra, lazily

    sampled = trace.TraceFlags(trace.TraceFlags.SAMPLED)

    def context(trace_id: int, span_id: int) -> Context:
        span = trace.NonRecordingSpan(
            trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=sampled)
        )
        return trace.set_span_in_context(span)

    return context


def _pipeline(url: str, ledger: _Ledger, batch: int) -> tuple[LoggerProvider, Logger]:
    """Provider → batch processor (bounded queue) → counting wrapper → OTLP/HTTP exporter."""
    # The otel extra, imported only when events are configured.
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (  # noqa: PLC0415
        OTLPLogExporter,
    )
    from opentelemetry.sdk._logs import LoggerProvider  # noqa: PLC0415
    from opentelemetry.sdk._logs.export import (  # noqa: PLC0415
        BatchLogRecordProcessor,
        LogRecordExportResult,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415

    version = _version()
    resource = Resource.create({"service.version": version})  # OTEL_SERVICE_NAME etc. apply
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    exporter = _CountingExporter(
        OTLPLogExporter(endpoint=url), ledger, LogRecordExportResult.FAILURE
    )
    processor = BatchLogRecordProcessor(
        cast("LogRecordExporter", exporter),
        max_queue_size=ledger.limit,
        max_export_batch_size=batch,
    )
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_log_record_processor(processor)
    return provider, provider.get_logger(_SCOPE, version)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("evalq")
    except PackageNotFoundError:
        return "0"
