"""OTLP importers: OTel GenAI (current and event form) and OpenInference instrumentation."""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer import ImportErrorReport, read_snapshots
from producer.snapshot import EventType, Snapshot

Lines = Callable[[str], list[dict[str, Any]]]
Writer = Callable[[list[Any]], Path]
Sigs = Callable[[Any], list[Any]]


def _spans(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        span
        for line in lines
        for resource in line.get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def _as_lines(spans: list[dict[str, Any]], per_line: int) -> list[dict[str, Any]]:
    return [
        {
            "resourceSpans": [
                {"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans[i : i + per_line]}]}
            ]
        }
        for i in range(0, len(spans), per_line)
    ]


def _by_session(path: Path, **options: Any) -> dict[str | None, list[Snapshot]]:
    table: dict[str | None, list[Snapshot]] = {}
    for snapshot in read_snapshots(path, **options):
        table.setdefault(snapshot.session_id, []).append(snapshot)
    return table


def test_genai_agent_trace_with_tool_spans(traces: Path) -> None:
    """Chat spans give the history, the agent span the catalog and conversation id."""
    (weather,) = _by_session(traces / "otel_genai.jsonl")["conv-weather"]
    assert weather.source == "otel_genai"
    assert [t.name for t in weather.tools or ()] == ["get_weather"]
    assert [e.call_id for e in weather.events if e.type is EventType.TOOL_RESULT] == [
        "call_B2",
        "call_A1",
    ]
    assert all(e.timestamp is not None for e in weather.events)
    assert weather.trace().issues == ()


def test_genai_split_lines_and_export_order_do_not_matter(
    fixture_lines: Lines, write_jsonl: Writer, traces: Path, signatures: Sigs
) -> None:
    """Spans shuffled across lines (any export order) give the same events."""
    expected = [signatures(s.events) for s in read_snapshots(traces / "otel_genai.jsonl")]
    spans = _spans(fixture_lines("otel_genai.jsonl"))
    random.Random(7).shuffle(spans)
    got = [signatures(s.events) for s in read_snapshots(write_jsonl(_as_lines(spans, 3)))]
    assert sorted(map(str, got)) == sorted(map(str, expected))


def test_genai_base64_ids_are_accepted(
    fixture_lines: Lines, write_jsonl: Writer, signatures: Sigs
) -> None:
    """The plain protobuf JSON mapping (base64 ids) reads like the hex OTLP/JSON form."""
    lines = fixture_lines("otel_genai.jsonl")
    spans = copy.deepcopy(_spans(lines))
    for span in spans:
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    hexed = [signatures(s.events) for s in read_snapshots(write_jsonl(_as_lines(_spans(lines), 4)))]
    b64 = [signatures(s.events) for s in read_snapshots(write_jsonl(_as_lines(spans, 4)))]
    assert b64 == hexed


def test_genai_session_keeps_the_longest_history(traces: Path) -> None:
    """Turn 2's trace repeats turn 1: turn 1 is not imported twice; the session has both."""
    invocations = _by_session(traces / "otel_genai.jsonl")["conv-refund"]
    assert [s.events[1].text for s in invocations] == [
        "Please refund order 1001, it arrived broken.",
        "Why was my refund reversed?",
    ]
    (session,) = _by_session(traces / "otel_genai.jsonl", unit="session")["conv-refund"]
    assert "reversed by the bank" in json.dumps(session.wire())


def test_genai_crash_leaves_a_missing_parent(traces: Path) -> None:
    """The agent span never ended (crash): the orphan chat span's trace is incomplete."""
    pending = _by_session(traces / "otel_genai.jsonl")[None]
    (snapshot,) = pending
    assert snapshot.events[-1].type is EventType.TOOL_CALL
    assert snapshot.tools is None  # the catalog was on the lost agent span: never inferred
    issues = snapshot.trace().issues
    assert "MISSING_PARENT_SPAN" in issues
    assert "PENDING_TOOL_CALL" in issues


def test_genai_truncated_attribute_is_flagged_not_repaired(traces: Path) -> None:
    """A history cut by the attribute length limit (invalid JSON) is TRUNCATED_CONTENT."""
    (forecast,) = _by_session(traces / "otel_genai.jsonl")["conv-forecast"]
    assert any("TRUNCATED_CONTENT" in e.issues for e in forecast.events)
    assert "TRUNCATED_CONTENT" in forecast.trace().issues


def test_genai_unended_span_is_not_ready(fixture_lines: Lines, write_jsonl: Writer) -> None:
    """A span with no end time is in-flight work: not snapshotted, reported as not ready."""
    spans = copy.deepcopy(_spans(fixture_lines("otel_genai.jsonl"))[:4])  # the weather trace
    spans[-1]["endTimeUnixNano"] = "0"
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl(_as_lines(spans, 4)), report=report)) == []
    assert [n.code for n in report.not_ready] == ["SPAN_NOT_ENDED"]


def test_genai_spans_without_content_are_not_ready(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """Content capture off leaves metadata only: reported NO_CONTENT, never an empty trace."""
    spans = copy.deepcopy(_spans(fixture_lines("otel_genai.jsonl")))
    for span in spans:
        span["attributes"] = [
            a for a in span["attributes"] if "messages" not in a["key"] and "call." not in a["key"]
        ]
    report = ImportErrorReport()
    assert list(read_snapshots(write_jsonl(_as_lines(spans, 5)), report=report)) == []
    assert report.not_ready_count == 5
    assert {n.code for n in report.not_ready} == {"NO_CONTENT"}


def test_legacy_events_merge_per_call_traces(traces: Path) -> None:
    """Semconv 1.30 events: each chat call is its own trace; only full histories remain."""
    snapshots = list(read_snapshots(traces / "otel_legacy.jsonl"))
    assert [s.events[1].text for s in snapshots] == [
        "Weather in Paris and Rome?",
        "Please refund order 1001, it arrived broken.",
        "Why was my refund reversed?",
    ]
    assert all(s.tools is None for s in snapshots)  # the event form defines no catalog
    assert all(s.trace().issues == () for s in snapshots)


def test_openinference_llm_and_tool_spans(traces: Path) -> None:
    """Flattened llm.* attributes rebuild the history; llm.tools gives the catalog."""
    table = _by_session(traces / "openinference.jsonl")
    (weather,) = table["sess-weather"]
    assert weather.source == "openinference"
    assert [t.name for t in weather.tools or ()] == ["get_weather"]
    assert weather.trace().fields["final_answer"].startswith("Paris is 14")
    assert len(table["sess-refund"]) == 2


def test_openinference_empty_catalog_comes_from_the_raw_request(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """No llm.tools.* attributes: the raw request's ``tools: []`` still says "none offered"."""
    spans = copy.deepcopy(_spans(fixture_lines("openinference.jsonl"))[:5])
    for span in spans:
        attrs = [a for a in span["attributes"] if not a["key"].startswith("llm.tools.")]
        for attr in attrs:
            if attr["key"] == "input.value" and attr["value"]["stringValue"].startswith("{"):
                request = json.loads(attr["value"]["stringValue"])
                request["tools"] = []
                attr["value"]["stringValue"] = json.dumps(request)
        span["attributes"] = attrs
    (snapshot,) = read_snapshots(write_jsonl(_as_lines(spans, 5)))
    assert snapshot.tools == ()


# --- OpenInference + Anthropic, and attribute truncation (GENERATED fixtures:
# openinference_anthropic.jsonl by openinference-instrumentation-anthropic 3.1.0, and
# openinference_truncated.jsonl by -openai 0.1.66 under OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=600) ---


def test_openinference_anthropic_tool_use_parts_are_calls_once(
    traces: Path, signatures: Sigs
) -> None:
    """tool_use content parts (also under tool_calls) are one call each, never unsupported."""
    (weather,) = _by_session(traces / "openinference_anthropic.jsonl")["sess-claude-weather"]
    assert weather.trace().issues == ()
    calls = [e.call_id for e in weather.events if e.type is EventType.TOOL_CALL]
    assert calls == ["call_A1", "call_B2"]
    reference = next(
        s for s in read_snapshots(traces / "anthropic.jsonl") if s.trace_id == "claude-weather"
    )
    assert signatures(weather.events) == signatures(reference.events)


def test_openinference_anthropic_parts_alone_still_give_the_calls(
    fixture_lines: Lines, write_jsonl: Writer, signatures: Sigs, traces: Path
) -> None:
    """A span with only the contents.K tool_use parts (no tool_calls keys) gives the calls."""
    want = [
        signatures(s.events)
        for s in read_snapshots(traces / "openinference_anthropic.jsonl")
        if s.session_id == "sess-claude-weather"
    ]
    spans = copy.deepcopy(_spans(fixture_lines("openinference_anthropic.jsonl")))
    for span in spans:
        kept = [a for a in span["attributes"] if ".message.tool_calls." not in a["key"]]
        span["attributes"] = kept
    got = [
        signatures(s.events)
        for s in read_snapshots(write_jsonl(_as_lines(spans, 5)))
        if s.session_id == "sess-claude-weather"
    ]
    assert got == want


def test_openinference_failed_tool_span_makes_an_error_result(traces: Path) -> None:
    """The tool message has no error flag; the TOOL span's ERROR status makes it an error."""
    (snapshot,) = _by_session(traces / "openinference_anthropic.jsonl")["sess-claude-tool_error"]
    (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert (result.text, result.status) == ("city not found", "error")
    assert snapshot.trace().issues == ()


def test_openinference_result_cut_by_the_limit_is_truncated(traces: Path) -> None:
    """A tool result longer than the attribute limit (prose or JSON) is TRUNCATED_CONTENT."""
    table = _by_session(traces / "openinference_truncated.jsonl")
    table.update(_by_session(traces / "openinference_anthropic.jsonl"))
    for session in ("sess-forecast", "sess-forecast_json", "sess-claude-forecast_json"):
        (snapshot,) = table[session]
        (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
        assert len(result.text or "") == 600, session
        assert result.issues == ("TRUNCATED_CONTENT",), session
        assert "TRUNCATED_CONTENT" in snapshot.trace().issues
        others = [e for e in snapshot.events if e.type is not EventType.TOOL_RESULT]
        assert all(e.issues == () for e in others), session  # short values are whole


def test_openinference_valid_json_cut_at_the_limit_is_truncated(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A result that still parses but is exactly the proven limit long was cut too."""
    spans = copy.deepcopy(_spans(fixture_lines("openinference_truncated.jsonl")))
    whole = '"' + "x" * 598 + '"'  # valid JSON, exactly 600 characters
    for span in spans:
        for attr in span["attributes"]:
            if attr["value"].get("stringValue", "").startswith("day 1: rain"):
                attr["value"]["stringValue"] = whole
    (snapshot, _) = read_snapshots(write_jsonl(_as_lines(spans, 5)))
    (result,) = [e for e in snapshot.events if e.type is EventType.TOOL_RESULT]
    assert (result.text, result.issues) == (whole, ("TRUNCATED_CONTENT",))


def test_openinference_without_a_proven_limit_nothing_is_flagged(
    fixture_lines: Lines, write_jsonl: Writer
) -> None:
    """A long whole result is not cut: no unparsable JSON value proves a limit."""
    spans = copy.deepcopy(_spans(fixture_lines("openinference.jsonl")))
    long_text = "cloudy all day; " * 50  # 800 characters of prose, nothing cut
    for span in spans:
        for attr in span["attributes"]:
            if attr["value"].get("stringValue") == '{"temp_c": 14, "summary": "cloudy"}':
                attr["value"]["stringValue"] = long_text
    weather = next(iter(read_snapshots(write_jsonl(_as_lines(spans, 5)))))
    results = [e for e in weather.events if e.type is EventType.TOOL_RESULT]
    assert long_text in [e.text for e in results]
    assert weather.trace().issues == ()


def test_openinference_generated_empty_catalog(traces: Path) -> None:
    """``tools=[]`` leaves no llm.tools.*; the raw request says "none offered": empty, not None."""
    (empty,) = _by_session(traces / "openinference.jsonl")["sess-empty_tools"]
    assert empty.tools == ()


def test_openinference_anthropic_reads_the_same_detected_or_forced(
    traces: Path, signatures: Sigs
) -> None:
    """format=auto, "otlp" and "openinference" agree on the Anthropic OpenInference file."""
    path = traces / "openinference_anthropic.jsonl"
    auto = [signatures(s.events) for s in read_snapshots(path)]
    for fmt in ("otlp", "openinference"):
        assert [signatures(s.events) for s in read_snapshots(path, format=fmt)] == auto


def test_otlp_snapshots_carry_the_trace_and_root_span_ids(traces: Path) -> None:
    """Every OTLP snapshot names its OTel trace and the invocation's root span (no parent)."""
    (weather,) = _by_session(traces / "otel_genai.jsonl")["conv-weather"]
    assert weather.otel is not None
    assert weather.otel.trace_id == weather.trace_id == "5b8aa5a2d2c872e8321cf37308d60001"
    assert weather.otel.span_id == "1000000000000002"  # the invoke_agent span
    for name in ("otel_legacy.jsonl", "openinference.jsonl", "openinference_anthropic.jsonl"):
        assert all(s.otel is not None for s in read_snapshots(traces / name))


def test_a_lost_root_is_named_by_its_childrens_parent_id(traces: Path) -> None:
    """The crashed trace lost its agent span: the root id is the missing parent its spans name."""
    (orphan,) = _by_session(traces / "otel_genai.jsonl")[None]
    assert orphan.otel is not None
    assert orphan.otel.span_id == "10000000000007d2"


def test_two_missing_parents_leave_no_otel_ids(fixture_lines: Lines, write_jsonl: Writer) -> None:
    """Top spans naming two different missing parents: the root is unknown, no otel ids."""
    spans = copy.deepcopy(_spans(fixture_lines("otel_genai.jsonl"))[:4])  # the weather trace
    for index, span in enumerate(spans):
        span["parentSpanId"] = f"20000000000000{index:02x}"
    (snapshot, *_) = read_snapshots(write_jsonl(_as_lines(spans, 4)))
    assert snapshot.otel is None


def test_otel_ids_are_provenance_not_evidence(traces: Path) -> None:
    """The same snapshot without its otel ids projects to the same engine trace."""
    (weather,) = _by_session(traces / "otel_genai.jsonl")["conv-weather"]
    plain = Snapshot.model_validate({k: v for k, v in weather.wire().items() if k != "otel"})
    assert plain.otel is None
    assert plain.trace() == weather.trace()
