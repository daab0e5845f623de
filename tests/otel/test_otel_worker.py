"""Evaluation events end to end: a real worker process, Redis, the stand-in judge, an OTLP receiver.

The snapshots come from the generated OTel fixtures (GenAI and OpenInference spans), so each
carries its trace id and root span id; the receiver decodes what the worker's exporter posts
(``ExportLogsServiceRequest`` protobuf). A silent receiver shows that events never hold up or
lose a record, and that the drop counter rises.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from producer import Producer, Snapshot, read_snapshots
from tests.otel.otlp_receiver import BlackHole, OtlpReceiver, ReceivedLog
from tests.queue.queue_kit import REPO, WorkerProcess, variants, wait_until, worker_env
from worker.embedded import free_port
from worker.judges.testing import JudgeServer
from worker.otel_events import EVENT_NAME
from worker.otel_export import SHUTDOWN_WAIT_S
from worker.store import Store

pytestmark = pytest.mark.services

FIXTURES = REPO / "tests" / "fixtures" / "traces"


def _otel_snapshots() -> list[Snapshot]:
    found = [
        s
        for name in ("otel_genai.jsonl", "openinference.jsonl")
        for s in read_snapshots(FIXTURES / name)
    ]
    assert all(s.otel is not None for s in found)
    return found


def _judge(judge_server: JudgeServer) -> dict[str, str]:
    return {
        "judge": "systemone",
        "judge_url": judge_server.base_url,
        "judge_api_key": "test-key",
        "thresholds": "0.2,0.8",
        "processes": "1",
    }


def _by_key(logs: list[ReceivedLog]) -> dict[tuple[str, str], ReceivedLog]:
    keyed = {}
    for log in logs:
        evaluation_id = str(log.attributes["evalq.evaluation.id"])
        keyed[evaluation_id, str(log.attributes["gen_ai.evaluation.name"])] = log
    return keyed


def test_every_metric_result_arrives_on_its_span(
    redis_url: str,
    store_url: str,
    store: Store,
    judge_server: JudgeServer,
    receiver: OtlpReceiver,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """One gen_ai.evaluation.result per stored result, after commit, on its snapshot's root span."""
    snapshots = _otel_snapshots()
    start_worker(
        broker_url=redis_url,
        store_url=store_url,
        otlp_endpoint=receiver.endpoint,
        **_judge(judge_server),
    )
    with Producer(redis_url) as producer:
        for snapshot in snapshots:
            producer.enqueue(snapshot)
    unique = {s.snapshot_id: s for s in snapshots}
    wait_until(lambda: store.count_evaluations() == len(unique), 60, "every evaluation record")
    rows = list(store.iter_results())
    assert receiver.wait_for(lambda logs: len(logs) >= len(rows), 30)
    logs = receiver.received()
    assert len(logs) == len(rows)  # one event per result, none twice
    events = _by_key(logs)
    statuses = set()
    for row in rows:
        log = events[(row.evaluation_id, row.metric_id)]
        otel = unique[row.snapshot_id].otel
        assert otel is not None
        assert (log.trace_id, log.span_id) == (otel.trace_id, otel.span_id)
        assert log.event_name == EVENT_NAME
        assert log.attributes["evalq.snapshot.id"] == row.snapshot_id
        assert log.attributes["gen_ai.evaluation.explanation"] == row.reason
        assert log.attributes["evalq.status"] == row.status
        assert log.body is None
        statuses.add(row.status)
    assert {"DECIDED", "SKIPPED"} <= statuses  # the fixtures include a broken (orphan) trace
    spans = {log.span_id for log in logs}
    assert len(spans) >= 5  # different invocations' root spans, not one id for all


def _scrape(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = {}
    for line in text.splitlines():
        match = re.match(r'evalq_otel_events_(\w+?)_total(?:\{reason="(\w+)"\})? (\S+)', line)
        if match:
            kind, reason, value = match.groups()
            found[reason or kind] = float(value)
    return found


def test_a_silent_receiver_never_holds_up_or_loses_a_record(
    redis_url: str,
    store_url: str,
    store: Store,
    judge_server: JudgeServer,
    black_hole: BlackHole,
    start_worker: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A receiver never answering: every record at full pace, drops counted, warm stop bounded."""
    # The receiver accepts connections and never answers; "full pace" is that of a worker
    # without events, and the warm stop ends within the bounded final flush.
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "8")  # the worker inherits the environment
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "10")
    snapshots = variants(_otel_snapshots()[0], 12, "silent")
    port = free_port()
    worker = start_worker(
        broker_url=redis_url,
        store_url=store_url,
        otlp_endpoint=black_hole.endpoint,
        metrics_port=str(port),
        **_judge(judge_server),
    )
    started = time.monotonic()
    with Producer(redis_url) as producer:
        for snapshot in snapshots:
            producer.enqueue(snapshot)
    wait_until(lambda: store.count_evaluations() == 12, 60, "every evaluation record")
    recorded_s = time.monotonic() - started
    assert recorded_s < 8.0  # a single blocking export would take its 10 s timeout
    rows = list(store.iter_results())
    per_evaluation = {r.evaluation_id: 0 for r in rows}
    for row in rows:
        per_evaluation[row.evaluation_id] += 1
    assert len(per_evaluation) == 12
    assert len(set(per_evaluation.values())) == 1  # every record whole
    wait_until(lambda: _scrape(port).get("QUEUE_FULL", 0) > 0, 10, "QUEUE_FULL drops counted")
    counts = _scrape(port)
    assert counts.get("exported", 0) == 0
    stop_started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    worker.process.wait(timeout=SHUTDOWN_WAIT_S + 20)
    assert time.monotonic() - stop_started < SHUTDOWN_WAIT_S + 15
    assert store.count_evaluations() == 12


def test_an_endpoint_without_the_extra_stops_the_worker_naming_it(
    redis_url: str, store_url: str, store: Store, tmp_path: Path
) -> None:
    """EVALQ_OTLP_ENDPOINT set where opentelemetry is not installed: exit 2, naming the extra."""
    shim = tmp_path / "shim"
    (shim / "opentelemetry").mkdir(parents=True)
    (shim / "opentelemetry" / "__init__.py").write_text("", encoding="utf-8")  # hides the real one
    env = worker_env(broker_url=redis_url, store_url=store_url, otlp_endpoint="http://127.0.0.1:9")
    env["PYTHONPATH"] = f"{shim}:{REPO}"
    done = subprocess.run(
        [sys.executable, "-m", "worker"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "EVALQ_OTLP_ENDPOINT: needs the otel extra: pip install 'evalq[otel]'" in done.stderr
    assert store.count_evaluations() == 0
