"""The OTLP/HTTP exporter of evaluation events, in-process, against real loopback receivers.

What arrives is decoded from the protobuf request body (``ExportLogsServiceRequest``); a silent
receiver (it never answers) shows that emitting never waits for the network and that every
event is accounted for, delivered or dropped with a reason.
"""

from __future__ import annotations

import sys
import time

import pytest
from prometheus_client import CollectorRegistry

from tests.otel.otlp_receiver import BlackHole, OtlpReceiver
from worker.config_check import check_configuration
from worker.metrics import WorkerMetrics
from worker.otel_events import EVENT_NAME, ResultEvent
from worker.otel_export import SERVICE_NAME, SHUTDOWN_WAIT_S, ResultExporter, logs_url
from worker.settings import ConfigError, load_settings

TRACE_ID = "5b8aa5a2d2c872e8321cf37308d60001"
SPAN_ID = "1000000000000002"


def _event(index: int, *, traced: bool = True) -> ResultEvent:
    return ResultEvent(
        {
            "gen_ai.evaluation.name": "grounded",
            "gen_ai.evaluation.score.value": 0.5,
            "gen_ai.evaluation.score.label": "pass",
            "evalq.passed": True,
            "evalq.index": index,
        },
        TRACE_ID if traced else None,
        SPAN_ID if traced else None,
    )


def _counts(registry: CollectorRegistry) -> dict[str, float]:
    counts = {"exported": registry.get_sample_value("evalq_otel_events_exported_total") or 0.0}
    for reason in ("QUEUE_FULL", "EXPORT_FAILED", "SHUTDOWN", "INTERNAL_ERROR"):
        value = registry.get_sample_value("evalq_otel_events_dropped_total", {"reason": reason})
        counts[reason] = value or 0.0
    return counts


def test_events_arrive_decoded_with_their_span_and_attributes(receiver: OtlpReceiver) -> None:
    """Each event is one log record: event name, trace/span ids, INFO, attributes, no body."""
    registry = CollectorRegistry()
    exporter = ResultExporter(receiver.endpoint, metrics=WorkerMetrics(registry))
    exporter.emit([_event(0), _event(1, traced=False)])
    exporter.shutdown()
    traced, plain = sorted(receiver.received(), key=lambda log: log.attributes["evalq.index"])
    assert traced.event_name == EVENT_NAME
    assert (traced.trace_id, traced.span_id) == (TRACE_ID, SPAN_ID)
    assert traced.severity_number == 9  # SEVERITY_NUMBER_INFO
    assert traced.body is None
    assert traced.attributes["gen_ai.evaluation.score.value"] == 0.5
    assert traced.attributes["evalq.passed"] is True
    assert traced.resource["service.name"] == SERVICE_NAME
    assert traced.scope == "evalq"
    assert (plain.trace_id, plain.span_id) == ("", "")
    assert _counts(registry)["exported"] == 2


def test_a_silent_receiver_never_blocks_emit_and_every_event_is_counted(
    black_hole: BlackHole, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Receiver never answers: emit never waits, shutdown bounded, exported + dropped = emitted."""
    # The queue bound drops (QUEUE_FULL) and the stuck batch fails at the export timeout.
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "1")
    registry = CollectorRegistry()
    exporter = ResultExporter(black_hole.endpoint, metrics=WorkerMetrics(registry))
    slowest_s = 0.0
    for index in range(200):
        started = time.perf_counter()
        exporter.emit([_event(index)])
        slowest_s = max(slowest_s, time.perf_counter() - started)
    assert exporter.queued <= exporter.max_queue_size == 8
    assert _counts(registry)["QUEUE_FULL"] >= 200 - 2 * 8
    started = time.monotonic()
    exporter.shutdown(timeout_s=2.0)
    assert time.monotonic() - started < 2.0 + 0.5
    deadline = time.monotonic() + 15
    while sum(_counts(registry).values()) < 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    counts = _counts(registry)
    assert sum(counts.values()) == 200
    assert counts["exported"] == 0
    assert counts["EXPORT_FAILED"] + counts["SHUTDOWN"] >= 1
    assert slowest_s < 0.5  # an append to a queue, never a network wait (timeout: 1 s)


def test_after_shutdown_events_are_counted_not_sent(receiver: OtlpReceiver) -> None:
    """An event emitted once the exporter stopped is dropped as SHUTDOWN."""
    registry = CollectorRegistry()
    exporter = ResultExporter(receiver.endpoint, metrics=WorkerMetrics(registry))
    exporter.shutdown()
    exporter.emit([_event(0)])
    assert _counts(registry)["SHUTDOWN"] == 1
    assert receiver.received() == []
    assert SHUTDOWN_WAIT_S <= 10


def test_the_logs_path_is_appended_once() -> None:
    """A base URL gets /v1/logs; a URL that already ends with it is kept."""
    assert logs_url("http://collector:4318") == "http://collector:4318/v1/logs"
    assert logs_url("http://collector:4318/") == "http://collector:4318/v1/logs"
    assert logs_url("https://otel.example/v1/logs") == "https://otel.example/v1/logs"
    assert logs_url("http://gw/otlp") == "http://gw/otlp/v1/logs"


def test_the_logged_url_holds_no_credentials(receiver: OtlpReceiver) -> None:
    """The URL a worker logs drops a user:password and a query (either may hold a secret)."""
    port = receiver.endpoint.rsplit(":", 1)[1]
    exporter = ResultExporter(
        f"http://user:s3cret@127.0.0.1:{port}/otlp?token=abc",
        metrics=WorkerMetrics(CollectorRegistry()),
    )
    try:
        assert exporter.shown_url == f"http://127.0.0.1:{port}/otlp/v1/logs"
    finally:
        exporter.shutdown()


def test_the_endpoint_setting_is_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """EVALQ_OTLP_ENDPOINT must be an http(s) URL with a host; empty means unset."""
    monkeypatch.setenv("EVALQ_OTLP_ENDPOINT", "grpc://collector:4317")
    with pytest.raises(ConfigError, match=r"EVALQ_OTLP_ENDPOINT: .*http"):
        load_settings()
    monkeypatch.setenv("EVALQ_OTLP_ENDPOINT", "")
    assert load_settings().otlp_endpoint is None
    monkeypatch.setenv("EVALQ_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert load_settings().otlp_endpoint == "http://127.0.0.1:4318"


def test_a_bad_queue_size_is_named(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver) -> None:
    """OTEL_BLRP_MAX_QUEUE_SIZE that is not a positive integer fails, naming the variable."""
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "many")
    with pytest.raises(ConfigError, match="OTEL_BLRP_MAX_QUEUE_SIZE"):
        ResultExporter(receiver.endpoint, metrics=WorkerMetrics(CollectorRegistry()))


def test_config_check_names_the_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """`evalq config check` with the endpoint set and the SDK not importable: exit 2, named."""
    monkeypatch.setenv("EVALQ_OTLP_ENDPOINT", "http://user:pw@127.0.0.1:4318")
    text, status = check_configuration()
    assert status == 0
    assert "otlp_endpoint" in text
    assert "http://user:***@127.0.0.1:4318" in text
    assert "pw@" not in text
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    text, status = check_configuration()
    assert status == 2
    assert "EVALQ_OTLP_ENDPOINT: needs the otel extra: pip install 'evalq[otel]'" in text
