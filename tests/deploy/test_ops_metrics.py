"""worker.metrics: bounded labels, counters per observation, judge instrumentation, exporters."""

from __future__ import annotations

import asyncio
import time
import urllib.error
from pathlib import Path

import pytest
import redis
from kombu import Connection
from prometheus_client import REGISTRY, CollectorRegistry

from producer.topology import ENQUEUED_AT_HEADER
from tests.deploy.ops_kit import (
    BIN,
    child_env,
    get,
    localize,
    quick_redis,
    run_check,
    service,
    started,
    stop,
    wait_until,
)
from worker import metrics
from worker.dead_letters import DeadLetterCode
from worker.embedded import free_port
from worker.evaluation import Entry, MetricResult, Reason, Report, RequestUsage, Status
from worker.judges import (
    ChoiceQuestion,
    InvalidReply,
    JudgeError,
    JudgeRequest,
    JudgeResponse,
    NoulQuestion,
    RetryPolicy,
    SyntheticJudge,
    SystemOneJudge,
    Usage,
    use_deadline,
)
from worker.judges.testing import JudgeServer, duplicate_key, serve_in_thread
from worker.judges.testing import status as http_status
from worker.metrics import OTHER, MeteredJudge, QueueCollector, QueueInspector, WorkerMetrics


@pytest.fixture
def registry() -> CollectorRegistry:
    """A registry of this test only."""
    return CollectorRegistry()


@pytest.fixture
def wm(registry: CollectorRegistry) -> WorkerMetrics:
    """Worker metrics on the test's registry, with two configured metric ids."""
    instance = WorkerMetrics(registry)
    instance.allow_metric_ids(["goal_completion", "tool_correctness"])
    return instance


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value, 0.0 when the labelled child does not exist yet."""
    return registry.get_sample_value(name, labels) or 0.0


def entry(metric_id: str, result: MetricResult) -> Entry:
    """A report entry at version 1."""
    return Entry(id=metric_id, version="1", result=result)


def report(*entries: Entry, requests: int = 1, usage: tuple[RequestUsage, ...] = ()) -> Report:
    """A report of ``entries`` that took 0.4 s."""
    return Report(trace_id="t1", results=entries, requests=requests, usage=usage, elapsed_s=0.4)


DECIDED = MetricResult(status=Status.DECIDED, score=0.9, passed=True, reason=Reason.DECIDED)
TIMEOUT = MetricResult.error(Reason.TIMEOUT)


def test_unknown_reason_is_recorded_as_other(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """A reason outside the known codes becomes OTHER; a known code keeps its name."""
    odd = MetricResult.skipped("CUSTOM_code_with_user_text_42")
    wm.observe_report(
        "live", report(entry("goal_completion", odd), entry("tool_correctness", TIMEOUT))
    )
    labels = {"metric": "goal_completion", "status": "SKIPPED"}
    assert value(registry, "evalq_metric_results_total", **labels, reason=OTHER) == 1
    assert value(registry, "evalq_metric_results_total", **labels, reason=odd.reason) == 0
    timeout = {"metric": "tool_correctness", "status": "ERROR", "reason": "TIMEOUT"}
    assert value(registry, "evalq_metric_results_total", **timeout) == 1


def test_every_dead_letter_code_is_a_known_reason() -> None:
    """Every dead-letter code is a label value (none becomes OTHER)."""
    codes = {code.value for code in DeadLetterCode}
    assert "SCHEDULED" in codes
    assert "UNKNOWN_TASK" in codes
    assert codes <= metrics.DEAD_LETTER_REASONS <= metrics.KNOWN_REASONS


def test_allowed_reasons_can_be_extended(wm: WorkerMetrics, registry: CollectorRegistry) -> None:
    """A code added with allow_reasons is kept as a label value from then on."""
    wm.observe_dead_letter("QUOTA_EXCEEDED", "live")
    wm.allow_reasons(["QUOTA_EXCEEDED"])
    wm.observe_dead_letter("QUOTA_EXCEEDED", "live")
    assert value(registry, "evalq_dead_letters_total", lane="live", reason=OTHER) == 1
    assert value(registry, "evalq_dead_letters_total", lane="live", reason="QUOTA_EXCEEDED") == 1


def test_unconfigured_metric_id_and_lane_are_other(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """Metric ids outside the configured set and unknown lanes are recorded as OTHER."""
    wm.observe_report("nightly", report(entry("not_configured", DECIDED)))
    labels = {"metric": OTHER, "status": "DECIDED", "reason": "DECIDED"}
    assert value(registry, "evalq_metric_results_total", **labels) == 1
    assert value(registry, "evalq_evaluations_total", lane=OTHER, outcome="ok") == 1


def test_metric_id_label_set_is_capped(wm: WorkerMetrics) -> None:
    """More than MAX_METRIC_IDS distinct ids are refused (labels stay bounded)."""
    with pytest.raises(ValueError, match="at most"):
        wm.allow_metric_ids(f"m{i}" for i in range(metrics.MAX_METRIC_IDS))


def test_observe_report_counts_outcome_results_timeouts_and_tokens(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """One report adds its outcome, each result, its TIMEOUTs, its tokens and unknown usage."""
    usage = (
        RequestUsage(model="m", usage=Usage(input_tokens=120, output_tokens=7)),
        RequestUsage(model="m", usage=None),
    )
    done = report(
        entry("goal_completion", DECIDED),
        entry("tool_correctness", TIMEOUT),
        requests=3,
        usage=usage,
    )
    wm.observe_report("backfill", done)
    wm.observe_report("backfill", done)
    assert value(registry, "evalq_evaluations_total", lane="backfill", outcome="timeout") == 2
    assert value(registry, "evalq_budget_timeouts_total", lane="backfill") == 2
    assert value(registry, "evalq_judge_tokens_total", direction="input") == 240
    assert value(registry, "evalq_judge_tokens_total", direction="output") == 14
    assert value(registry, "evalq_judge_usage_unknown_total") == 4  # 3 requests, 1 usage, twice
    assert value(registry, "evalq_evaluation_duration_seconds_count", lane="backfill") == 2
    assert value(
        registry, "evalq_evaluation_duration_seconds_sum", lane="backfill"
    ) == pytest.approx(0.8)


def test_a_message_of_reports_counts_as_each_report_would(wm: WorkerMetrics) -> None:
    """observe_reports over a batch leaves every sample as one observe_report per report."""
    usage = (RequestUsage(model="m", usage=Usage(input_tokens=5, output_tokens=2)),)
    batch = [
        report(entry("goal_completion", DECIDED), entry("tool_correctness", TIMEOUT)),
        report(entry("goal_completion", DECIDED), usage=usage),
        report(entry("not_configured", MetricResult.skipped("CUSTOM_x")), requests=2),
    ]
    one_by_one = CollectorRegistry()
    single = WorkerMetrics(one_by_one)
    single.allow_metric_ids(["goal_completion", "tool_correctness"])
    for item in batch:
        single.observe_report("backfill", item)
    wm.observe_reports("backfill", batch)
    wm.observe_reports("backfill", [])  # an empty message changes nothing

    def samples(target: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        found = {}
        for family in (target.evaluations, target.metric_results, target.budget_timeouts):
            for metric in family.collect():
                for sample in metric.samples:
                    if not sample.name.endswith("_created"):  # creation times differ
                        found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return found

    assert samples(wm) == samples(single)
    assert samples(wm)  # the comparison is not between two empty sets


def test_timeouts_of_an_overloaded_process_are_counted_as_its_own(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """overloaded=True adds each TIMEOUT evaluation to evalq_overload_timeouts; others never."""
    timed_out = report(entry("goal_completion", DECIDED), entry("tool_correctness", TIMEOUT))
    decided = report(entry("goal_completion", DECIDED))
    wm.observe_reports("live", [timed_out, decided], overloaded=True)
    wm.observe_reports("live", [timed_out])  # the judge's TIMEOUT: the loop had room
    wm.observe_reports("backfill", [decided], overloaded=True)
    assert value(registry, "evalq_overload_timeouts_total", lane="live") == 1
    assert value(registry, "evalq_evaluations_total", lane="live", outcome="timeout") == 2
    assert value(registry, "evalq_overload_timeouts_total", lane="backfill") == 0


def test_loop_lag_samples_land_in_their_buckets(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """Each lag sample is one observation; a negative one (clock jitter) counts as zero."""
    for lag_s in (0.001, 0.03, 0.3, -0.002, float("nan")):
        wm.observe_loop_lag(lag_s)
    assert value(registry, "evalq_loop_lag_seconds_count") == 4
    assert value(registry, "evalq_loop_lag_seconds_bucket", le="0.005") == 2
    assert value(registry, "evalq_loop_lag_seconds_bucket", le="0.1") == 3
    assert value(registry, "evalq_loop_lag_seconds_sum") == pytest.approx(0.331)


def test_evaluation_outcome_error_and_ok(wm: WorkerMetrics, registry: CollectorRegistry) -> None:
    """ERROR results other than TIMEOUT make the outcome error; none make it ok."""
    wm.observe_report(
        "live", report(entry("goal_completion", MetricResult.error(Reason.BACKEND_ERROR)))
    )
    wm.observe_report(
        "live", report(entry("goal_completion", MetricResult.skipped(Reason.NO_EVIDENCE)))
    )
    wm.observe_duplicate("live")
    for outcome in ("error", "ok", "duplicate"):
        assert value(registry, "evalq_evaluations_total", lane="live", outcome=outcome) == 1, (
            outcome
        )


def test_judge_status_classification() -> None:
    """Exceptions map to the bounded judge statuses."""
    assert metrics.judge_status(None) == "ok"
    assert metrics.judge_status(JudgeError("x", status=429, retryable=True)) == "http_429"
    assert metrics.judge_status(JudgeError("x", status=503, retryable=True)) == "http_5xx"
    assert metrics.judge_status(JudgeError("x", status=401)) == "http_4xx"
    assert metrics.judge_status(JudgeError("x")) == "transport_error"
    assert metrics.judge_status(asyncio.CancelledError()) == "timeout"
    assert metrics.judge_status(TimeoutError()) == "timeout"
    assert metrics.judge_status(RuntimeError("boom")) == "backend_error"
    assert set(metrics.JUDGE_STATUSES) >= {"ok", "invalid", "timeout", "http_429"}


def _request() -> JudgeRequest:
    questions = {
        "q_ok": NoulQuestion(instructions="Was the task completed?"),
        "q_pick": ChoiceQuestion(instructions="Which tone?", criteria={"calm": None, "curt": None}),
    }
    return JudgeRequest(state={"answer": "done"}, questions=questions)


def test_metered_judge_records_ok_and_latency(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """A valid reply from the synthetic judge counts as ok with one latency observation."""
    judge = MeteredJudge(SyntheticJudge(), wm)
    response = asyncio.run(judge(_request()))
    assert isinstance(response, JudgeResponse)
    assert value(registry, "evalq_judge_requests_total", status="ok") == 1
    assert value(registry, "evalq_judge_latency_seconds_count") == 1


def test_metered_wire_judge_counts_ok_and_invalid_replies(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """Over System One (which validates replies itself) ok and invalid replies are both counted."""

    async def two_calls(server: JudgeServer) -> None:
        async with SystemOneJudge(server.base_url, api_key="k") as inner:
            judge = MeteredJudge(inner, wm)
            await judge(_request())
            server.script(duplicate_key())  # the second reply breaks strict JSON
            with pytest.raises(InvalidReply):
                await judge(_request())

    with serve_in_thread() as server:
        asyncio.run(two_calls(server))
    assert value(registry, "evalq_judge_requests_total", status="ok") == 1
    assert value(registry, "evalq_judge_requests_total", status="invalid") == 1


def test_metered_judge_closes_the_wrapped_judge(wm: WorkerMetrics) -> None:
    """aclose() on the wrapper is forwarded to the wrapped judge (the runtime closes judges so)."""

    class Closable:
        closed = False

        async def __call__(self, request: JudgeRequest) -> JudgeResponse:
            raise AssertionError("not called")

        async def aclose(self) -> None:
            self.closed = True

    inner = Closable()
    asyncio.run(MeteredJudge(inner, wm).aclose())
    assert inner.closed
    asyncio.run(MeteredJudge(SyntheticJudge(), wm).aclose())  # a judge without aclose is fine


def test_metered_judge_records_timeout_on_cancellation(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """A judge cut off by the evaluation deadline (cancelled) counts as timeout and re-raises."""

    async def slow(request: JudgeRequest) -> JudgeResponse:
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    async def run() -> None:
        async with asyncio.timeout(0.05):
            await MeteredJudge(slow, wm)(_request())

    with pytest.raises(TimeoutError):
        asyncio.run(run())
    assert value(registry, "evalq_judge_requests_total", status="timeout") == 1


def test_judge_http_responses_count_every_429_attempt_of_a_real_server(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """Against a real server answering 429 twice then OK: 2 x 429 + 1 x 2xx, and one ok request."""
    policy = RetryPolicy(attempts=3, backoff_initial_s=0.01, backoff_max_s=0.02, backoff_jitter_s=0)

    async def run(base_url: str) -> None:
        judge = SystemOneJudge(
            base_url, api_key="k-test", policy=policy, on_response=wm.observe_http_status
        )
        async with judge:
            with use_deadline(time.monotonic() + 20):
                await MeteredJudge(judge, wm)(_request())

    with serve_in_thread(api_key="k-test") as server:
        server.script(http_status(429, retry_after=0), http_status(429, retry_after=0))
        asyncio.run(run(server.base_url))
    assert value(registry, "evalq_judge_http_responses_total", code="429") == 2
    assert value(registry, "evalq_judge_http_responses_total", code="2xx") == 1
    assert value(registry, "evalq_judge_requests_total", status="ok") == 1
    assert value(registry, "evalq_judge_requests_total", status="http_429") == 0


def test_module_functions_record_on_the_default_registry() -> None:
    """observe_dead_letter etc. increase the process-wide registry that start_exporter serves."""
    labels = {"lane": "outcomes", "reason": "UNDECODABLE"}
    before = REGISTRY.get_sample_value("evalq_dead_letters_total", labels) or 0.0
    metrics.observe_dead_letter("UNDECODABLE", "outcomes")
    assert REGISTRY.get_sample_value("evalq_dead_letters_total", labels) == before + 1


def test_exporter_serves_metrics_on_loopback(
    wm: WorkerMetrics, registry: CollectorRegistry
) -> None:
    """start_exporter serves the registry on 127.0.0.1; stop() ends it."""
    wm.observe_judge_call("http_429", 0.25)
    exporter = metrics.start_exporter(0, "127.0.0.1", registry)
    try:
        status, body = get(f"http://127.0.0.1:{exporter.port}/metrics")
        assert status == 200
        assert 'evalq_judge_requests_total{status="http_429"} 1.0' in body
    finally:
        exporter.stop()
    with pytest.raises(urllib.error.URLError, match="refused"):
        get(f"http://127.0.0.1:{exporter.port}/metrics", timeout_s=2)


# -- queues ---------------------------------------------------------------------------------------


def _publish(
    conn: Connection, queue: str, *, priority: int = 0, enqueued_at: float | None = None
) -> None:
    headers = {} if enqueued_at is None else {ENQUEUED_AT_HEADER: enqueued_at}
    producer = conn.Producer(serializer="json")
    producer.publish(
        {"x": 1}, routing_key=queue, priority=priority, headers=headers, declare=[], exchange=""
    )


def test_queue_inspector_counts_priority_sublists_unacked_and_age(redis_url: str) -> None:
    """Depth sums priority sub-lists; unacked counts per lane; age comes from the header."""
    now = time.time()
    with Connection(redis_url) as conn:
        _publish(conn, "evalq.live", enqueued_at=now - 120)
        _publish(conn, "evalq.live", priority=6, enqueued_at=now - 5)
        _publish(conn, "evalq.live", enqueued_at=now - 1)
        for _ in range(3):
            _publish(conn, "evalq.backfill")
        held = conn.SimpleQueue("evalq.backfill", no_ack=False)
        message = held.get(timeout=5)  # delivered, not acked: kombu keeps it in `unacked`
        client = redis.Redis.from_url(redis_url)
        stats = QueueInspector(client, clock=lambda: now).snapshot()
        lanes = {lane.lane: lane for lane in stats.lanes}
        assert lanes["live"].depth == 3
        assert lanes["live"].oldest_age_s == pytest.approx(120, abs=0.5)
        assert (lanes["backfill"].depth, lanes["backfill"].unacked) == (2, 1)
        assert lanes["outcomes"].depth == 0
        assert lanes["outcomes"].oldest_age_s is None
        assert stats.unacked_total == 1
        assert stats.oldest_unacked_age_s is not None
        assert stats.oldest_unacked_age_s >= 0
        assert stats.used_memory_bytes > 0
        message.ack()
        held.close()
        client.close()


def test_queue_age_without_header_is_tracked_from_first_sight(redis_url: str) -> None:
    """Without the enqueue header: unknown at first, then grows while the same message waits."""
    clock = iter([1000.0, 1030.0])
    with Connection(redis_url) as conn:
        _publish(conn, "evalq.outcomes")
    client = redis.Redis.from_url(redis_url)
    inspector = QueueInspector(client, clock=lambda: next(clock))
    first = {lane.lane: lane for lane in inspector.snapshot().lanes}["outcomes"]
    second = {lane.lane: lane for lane in inspector.snapshot().lanes}["outcomes"]
    client.close()
    assert first.oldest_age_s is None
    assert second.oldest_age_s == pytest.approx(30.0)


def test_queue_collector_reports_broker_down() -> None:
    """When Redis cannot be read the collector yields only evalq_queue_up 0."""
    client = quick_redis(host="127.0.0.1", port=free_port())
    families = list(QueueCollector(QueueInspector(client)).collect())
    assert [f.name for f in families] == ["evalq_queue_up"]
    assert families[0].samples[0].value == 0


def test_queue_exporter_command_of_compose(redis_url: str, tmp_path: Path) -> None:
    """compose's queue-exporter command serves depth per lane; its healthcheck passes, then not."""
    port = str(free_port())
    spec = service("queue-exporter")
    argv = localize(spec.argv, {"0.0.0.0": "127.0.0.1", "9809": port})
    argv[0] = str(BIN / "evalq")
    with Connection(redis_url) as conn:
        _publish(conn, "evalq.live", enqueued_at=time.time() - 60)
    process = started(argv, child_env({"EVALQ_BROKER_URL": redis_url}), tmp_path / "q.log")
    try:
        body = wait_until(lambda: _scrape(port), 30, "queue exporter")
        assert 'evalq_queue_depth{lane="live"} 1.0' in body
        assert "evalq_queue_up 1.0" in body
        age = float(body.split('evalq_queue_oldest_age_seconds{lane="live"} ')[1].split()[0])
        assert 59 <= age < 120
        check = localize(spec.healthcheck or [], {"9809": port})
        check[0] = str(BIN / "python")
        assert run_check(check) == 0
    finally:
        stop(process)
    assert process.returncode == 0  # SIGTERM as PID 1: clean exit, not killed
    assert run_check(check) == 1


def _scrape(port: str) -> str | None:
    try:
        status, body = get(f"http://127.0.0.1:{port}/metrics", timeout_s=2)
    except OSError:
        return None
    return body if status == 200 else None


def test_collector_families_have_documented_names(redis_url: str) -> None:
    """The collector exposes exactly the gauges the alerts and dashboard use."""
    client = redis.Redis.from_url(redis_url)
    names = {f.name for f in QueueCollector(QueueInspector(client)).collect()}
    client.close()
    assert names == {
        "evalq_queue_up",
        "evalq_queue_depth",
        "evalq_queue_unacked",
        "evalq_queue_oldest_age_seconds",
        "evalq_queue_oldest_unacked_age_seconds",
        "evalq_redis_used_memory_bytes",
        "evalq_redis_maxmemory_bytes",
    }
