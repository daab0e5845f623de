"""The event mapping (worker.otel_events) and the handler's hand-over of committed records.

The mapping is checked on records of every status; the hand-over in-process (``runtime.use``) on
a real runtime, the synthetic judge and a real SQLite store, with a list as the event sink.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from producer import Lane, Snapshot, read_snapshots
from producer.snapshot import EVALUATE_TASK, OtelRef
from tests.queue.queue_kit import REPO, example_snapshots
from worker import runtime
from worker.canonical_json import thaw
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler, Verdict
from worker.judges import SyntheticJudge
from worker.otel_events import EVENT_NAME, ResultEvent, result_events, score_label
from worker.runtime import Runtime
from worker.settings import load_settings
from worker.store import EvaluationRecord, MetricResultRecord, Store, open_store

OTEL_FIXTURE = REPO / "tests" / "fixtures" / "traces" / "otel_genai.jsonl"
SNAPSHOT_ID = "a" * 64
EVALUATION_ID = "b" * 64


def _result(status: str, reason: str, **fields: Any) -> MetricResultRecord:
    return MetricResultRecord(
        metric_id=fields.pop("metric_id", "grounded"),
        metric_version="grounded@2:t0.2-0.8",
        status=status,
        reason=reason,
        **fields,
    )


def _record(*results: MetricResultRecord) -> EvaluationRecord:
    return EvaluationRecord(
        snapshot_id=SNAPSHOT_ID,
        metric_set="agent",
        metric_set_version="agent@0123456789abcdef",
        judge_kind="systemone",
        judge_model="jev-latest",
        synthetic=False,
        requests=1,
        elapsed_s=0.5,
        lane="live",
        results=results,
    )


def _events(snapshot: Snapshot, *results: MetricResultRecord) -> tuple[ResultEvent, ...]:
    return result_events(
        snapshot, _record(*results), snapshot_id=SNAPSHOT_ID, evaluation_id=EVALUATION_ID
    )


@pytest.fixture
def otel_snapshot() -> Snapshot:
    """The first snapshot of the generated OTel GenAI fixture (it carries OTel ids)."""
    snapshot = next(iter(read_snapshots(OTEL_FIXTURE)))
    assert snapshot.otel is not None
    return snapshot


def test_a_decided_result_is_labelled_pass_or_fail_with_its_score(otel_snapshot: Snapshot) -> None:
    """DECIDED: name = metric id, score.value, label pass/fail, explanation = the reason code."""
    passed, failed = _events(
        otel_snapshot,
        _result("DECIDED", "ALL_CLAIMS_REQUIRED", score=0.95, passed=True),
        _result("DECIDED", "CLAIM_UNSUPPORTED", score=0.1, passed=False, metric_id="completeness"),
    )
    assert passed.attributes["gen_ai.evaluation.name"] == "grounded"
    assert passed.attributes["gen_ai.evaluation.score.value"] == 0.95
    assert passed.attributes["gen_ai.evaluation.score.label"] == "pass"
    assert passed.attributes["gen_ai.evaluation.explanation"] == "ALL_CLAIMS_REQUIRED"
    assert passed.attributes["evalq.passed"] is True
    assert failed.attributes["gen_ai.evaluation.name"] == "completeness"
    assert failed.attributes["gen_ai.evaluation.score.label"] == "fail"
    assert failed.attributes["evalq.passed"] is False
    assert "error.type" not in passed.attributes
    assert "error.type" not in failed.attributes


def test_a_label_metric_carries_its_own_label(otel_snapshot: Snapshot) -> None:
    """DECIDED with a label (call_appropriate, tool_execution): that label, not pass/fail."""
    (event,) = _events(
        otel_snapshot,
        _result("DECIDED", "CHOSEN", score=0.9, label="wrong_tool", metric_id="call_appropriate"),
    )
    assert event.attributes["gen_ai.evaluation.score.label"] == "wrong_tool"
    assert "evalq.passed" not in event.attributes


@pytest.mark.parametrize(
    ("status", "reason", "label"),
    [
        ("INCONCLUSIVE", "LOW_CONFIDENCE", "inconclusive"),
        ("SKIPPED", "INCOMPLETE_TRACE", "skipped"),
        ("ERROR", "TIMEOUT", "error"),
    ],
)
def test_a_result_without_verdict_is_labelled_by_its_status(
    otel_snapshot: Snapshot, status: str, reason: str, label: str
) -> None:
    """Non-DECIDED: label = the status (lowercase), no score, no verdict; ERROR adds error.type."""
    (event,) = _events(otel_snapshot, _result(status, reason))
    attributes = event.attributes
    assert attributes["gen_ai.evaluation.score.label"] == label
    assert attributes["gen_ai.evaluation.explanation"] == reason
    assert attributes["evalq.status"] == status
    assert "gen_ai.evaluation.score.value" not in attributes
    assert "evalq.passed" not in attributes
    assert attributes.get("error.type") == (reason if status == "ERROR" else None)


def test_score_label_covers_a_decided_result_without_verdict_or_label() -> None:
    """A DECIDED result with neither verdict nor label still gets a bounded label."""
    assert score_label(_result("DECIDED", "SCORED", score=0.4)) == "decided"


def test_events_carry_the_evaluation_ids_versions_and_window(otel_snapshot: Snapshot) -> None:
    """evalq.* attributes: snapshot/evaluation ids, metric and set versions, judge, window."""
    (event,) = _events(otel_snapshot, _result("DECIDED", "OK", score=1.0, passed=True))
    window = otel_snapshot.window
    assert event.attributes["evalq.snapshot.id"] == SNAPSHOT_ID
    assert event.attributes["evalq.evaluation.id"] == EVALUATION_ID
    assert event.attributes["evalq.metric.version"] == "grounded@2:t0.2-0.8"
    assert event.attributes["evalq.metric_set.version"] == "agent@0123456789abcdef"
    assert event.attributes["evalq.judge.kind"] == "systemone"
    assert event.attributes["evalq.window.rule"] == window.rule.value
    assert event.attributes["evalq.window.cutoff_event_id"] == window.cutoff_event_id
    assert window.cutoff_time is not None
    assert event.attributes["evalq.window.cutoff_time"] == window.cutoff_time.isoformat()


def test_the_event_belongs_to_the_snapshots_otel_span(otel_snapshot: Snapshot) -> None:
    """An OTel-imported snapshot's events carry its trace id and root span id; others none."""
    (event,) = _events(otel_snapshot, _result("SKIPPED", "NO_EVIDENCE"))
    assert otel_snapshot.otel is not None
    assert (event.trace_id, event.span_id) == (
        otel_snapshot.otel.trace_id,
        otel_snapshot.otel.span_id,
    )
    assert event.trace_id == otel_snapshot.trace_id  # the OTLP importer keys traces by it
    plain = example_snapshots()["order-42"]
    (other,) = _events(plain, _result("SKIPPED", "NO_EVIDENCE"))
    assert (other.trace_id, other.span_id) == (None, None)


def test_otel_provenance_is_left_out_of_the_wire_while_unset() -> None:
    """A snapshot without OTel ids keeps its wire form (and id); with them, otel rides along."""
    plain = example_snapshots()["order-42"]
    assert "otel" not in plain.wire()
    ref = OtelRef(trace_id="5b8aa5a2d2c872e8321cf37308d60001", span_id="1000000000000002")
    tagged = Snapshot.model_validate({**plain.wire(), "otel": ref.model_dump()})
    assert tagged.wire()["otel"] == ref.model_dump()
    assert Snapshot.model_validate(tagged.wire()) == tagged
    with pytest.raises(ValueError, match="hex"):
        OtelRef(trace_id="0" * 32, span_id="1000000000000002")


# -- the hand-over, in-process -------------------------------------------------------------------


class ListSink:
    """An event sink that keeps what it gets, and checks the record is in the store by then."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.events: list[ResultEvent] = []
        self.committed_first: list[bool] = []

    def emit(self, events: Iterable[ResultEvent]) -> None:
        taken = list(events)
        evaluation_id = str(taken[0].attributes["evalq.evaluation.id"])
        self.committed_first.append(self.store.get_evaluation(evaluation_id) is not None)
        self.events.extend(taken)


class BrokenSink:
    """An event sink that fails on every call."""

    def emit(self, events: Iterable[ResultEvent]) -> None:
        raise RuntimeError("sink down")


@pytest.fixture
def store(workdir: Path) -> Iterator[Store]:
    """A SQLite store of this test."""
    with open_store(f"sqlite:///{workdir / 'evalq.db'}") as opened:
        yield opened


def _evaluate(item: Any) -> Delivery:
    return Delivery(EVALUATE_TASK, (item,), {}, Lane.LIVE, raw_bytes(item))


def _handled(store: Store, sink: Any, snapshots: list[Snapshot]) -> list[Verdict]:
    rt = Runtime(load_settings(processes=1), store=store, judge=SyntheticJudge())
    try:
        with runtime.use(rt):
            handler = Handler(rt, events=sink)
            return rt.call(handler.handle([_evaluate(s.wire()) for s in snapshots]))
    finally:
        rt.close()


def _content_strings(snapshot: Snapshot, store: Store) -> set[str]:
    """Every text of the snapshot and of the stored evidence longer than a code would be."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str) and len(value) > 12:
            found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    wire = snapshot.wire()
    for event in wire["events"]:  # its content, not its ids (a cutoff event id is an id)
        walk([event.get("text"), event.get("arguments")])
    walk(wire.get("tools"))
    for row in store.iter_results():
        stored = store.get_evaluation(row.evaluation_id)
        assert stored is not None
        for result in stored.record.results:
            walk(thaw(result.evidence))
    return found


def test_committed_records_give_one_event_per_result_and_no_content(store: Store) -> None:
    """One event per committed metric result, after the commit, with no trace or evidence text."""
    snapshots = list(read_snapshots(OTEL_FIXTURE))
    sink = ListSink(store)
    verdicts = _handled(store, sink, snapshots)
    assert verdicts == [Verdict.ACK] * len(snapshots)
    results = [(r.evaluation_id, r.metric_id) for r in store.iter_results()]
    got = [
        (e.attributes["evalq.evaluation.id"], e.attributes["gen_ai.evaluation.name"])
        for e in sink.events
    ]
    assert sorted(got) == sorted(results)
    assert sink.committed_first
    assert all(sink.committed_first)
    by_snapshot = {s.snapshot_id: s for s in snapshots}
    for event in sink.events:
        snapshot = by_snapshot[str(event.attributes["evalq.snapshot.id"])]
        assert snapshot.otel is not None
        assert (event.trace_id, event.span_id) == (snapshot.otel.trace_id, snapshot.otel.span_id)
    text = json.dumps([dict(e.attributes) for e in sink.events])
    content = {s for snap in snapshots for s in _content_strings(snap, store)}
    assert len(content) > 10  # the check has texts to look for
    assert sorted(s for s in content if s in text) == []
    assert EVENT_NAME == "gen_ai.evaluation.result"


def test_a_duplicate_delivery_emits_nothing_more(store: Store) -> None:
    """The same snapshot handled twice: one record, its events once."""
    snapshot = next(iter(read_snapshots(OTEL_FIXTURE)))
    sink = ListSink(store)
    _handled(store, sink, [snapshot])
    first = len(sink.events)
    _handled(store, sink, [snapshot])
    assert first > 0
    assert len(sink.events) == first


def test_a_failing_sink_never_costs_the_record_or_its_ack(store: Store) -> None:
    """A sink that raises: the message is still acked and its record stored."""
    verdicts = _handled(store, BrokenSink(), [example_snapshots()["order-42"]])
    assert verdicts == [Verdict.ACK]
    assert store.count_evaluations() == 1
