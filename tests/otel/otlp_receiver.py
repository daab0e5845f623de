"""A real OTLP/HTTP logs receiver on 127.0.0.1 for the tests, and a receiver that never answers.

:class:`OtlpReceiver` serves ``POST /v1/logs`` (``http.server`` in a thread), decodes each body as
an ``ExportLogsServiceRequest`` protobuf (opentelemetry-proto), keeps every log record with its
resource and scope, and answers with an ``ExportLogsServiceResponse``. :class:`BlackHole` listens
and never accepts: an exporter's requests hang until their timeout (a dead receiver at its worst).
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["BlackHole", "OtlpReceiver", "ReceivedLog", "any_value"]


def any_value(value: AnyValue) -> Any:
    """A protobuf ``AnyValue`` as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


@dataclass(frozen=True)
class ReceivedLog:
    """One decoded log record: event name, trace context, attributes, body, resource, scope."""

    event_name: str
    trace_id: str  # hex; "" when the record has none
    span_id: str
    severity_number: int
    attributes: dict[str, Any]
    body: Any
    resource: dict[str, Any]
    scope: str


def _decoded(body: bytes) -> list[ReceivedLog]:
    request = ExportLogsServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_logs in request.resource_logs:
        resource = {a.key: any_value(a.value) for a in resource_logs.resource.attributes}
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                found.append(
                    ReceivedLog(
                        event_name=record.event_name,
                        trace_id=record.trace_id.hex(),
                        span_id=record.span_id.hex(),
                        severity_number=record.severity_number,
                        attributes={a.key: any_value(a.value) for a in record.attributes},
                        body=any_value(record.body) if record.HasField("body") else None,
                        resource=resource,
                        scope=scope_logs.scope.name,
                    )
                )
    return found


def _inflated(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


class OtlpReceiver:
    """``POST /v1/logs`` on 127.0.0.1 (a free port); ``logs`` holds what arrived, decoded."""

    def __init__(self) -> None:
        self.logs: list[ReceivedLog] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = _inflated(self.rfile.read(length), self.headers.get("Content-Encoding"))
                if self.path != "/v1/logs":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._take(_decoded(raw))
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
                del format, args  # quiet

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, logs: list[ReceivedLog]) -> None:
        with self._lock:
            self.requests += 1
            self.logs.extend(logs)

    @property
    def endpoint(self) -> str:
        """The base URL (the exporter appends ``/v1/logs``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def received(self) -> list[ReceivedLog]:
        """A copy of what arrived so far."""
        with self._lock:
            return list(self.logs)

    def wait_for(self, predicate: Callable[[list[ReceivedLog]], bool], timeout_s: float) -> bool:
        """Poll until ``predicate(received())`` holds (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.received()):
                return True
            time.sleep(0.05)
        return predicate(self.received())

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class BlackHole:
    """A listening socket on 127.0.0.1 that never accepts: connections hang, nothing answers."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(1024)

    @property
    def endpoint(self) -> str:
        """The base URL of the silent port."""
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc: object) -> None:
        self._socket.close()
