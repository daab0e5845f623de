"""Property tests: arbitrary JSON lines never crash the reader, only become rejections."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer import ImportErrorReport, read_snapshots
from producer._reader import RejectedLine

_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])
_content = (
    st.none()
    | st.text(max_size=10)
    | st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "image_url", 3]), "text": _scalars}
        ),
        max_size=3,
    )
)
_tool_call = st.fixed_dictionaries(
    {
        "id": st.none() | st.sampled_from(["c1", "c2", ""]) | st.integers(),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": st.none() | st.text(max_size=5), "arguments": st.text(max_size=12) | _json}
        )
        | _json,
    }
)
_message = st.fixed_dictionaries(
    {"role": _roles, "content": _content},
    optional={
        "tool_calls": st.lists(_tool_call, max_size=3) | _json,
        "tool_call_id": st.none() | st.sampled_from(["c1", "c2"]) | _json,
    },
)
_chat_record = st.fixed_dictionaries(
    {"messages": st.lists(_message, max_size=6)},
    optional={
        "id": st.text(max_size=6) | _json,
        "tools": st.none() | st.lists(_json, max_size=2) | _json,
        "labels": _json,
        "metadata": _json,
        "claims": _json,
        "contexts": _json,
    },
)


def _read(records: list[Any]) -> tuple[list[Any], ImportErrorReport]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "input.jsonl"
        lines = [json.dumps(r, ensure_ascii=False) for r in records]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        report = ImportErrorReport()
        snapshots = list(read_snapshots(path, report=report))
        snapshots += list(read_snapshots(path, unit="tool_call", report=ImportErrorReport()))
        snapshots += list(read_snapshots(path, unit="session", report=ImportErrorReport()))
    return snapshots, report


def _check(snapshots: list[Any], report: ImportErrorReport, lines: int) -> None:
    for snapshot in snapshots:
        snapshot.check_window()
        assert len(snapshot.snapshot_id) == 64
    assert all(isinstance(r, RejectedLine) and 1 <= r.line <= lines for r in report.rejected)
    assert report.lines_read == lines


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_json, min_size=1, max_size=4))
def test_arbitrary_json_lines_never_crash(records: list[Any]) -> None:
    """Any JSON value on a line gives snapshots or RejectedLine entries, never an exception."""
    snapshots, report = _read(records)
    _check(snapshots, report, len(records))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_chat_record, min_size=1, max_size=3))
def test_chat_shaped_garbage_never_crashes(records: list[Any]) -> None:
    """Chat-shaped records with wrong types anywhere are rejected or imported, never crash."""
    snapshots, report = _read(records)
    _check(snapshots, report, len(records))


_wrapped = st.one_of(
    st.fixed_dictionaries({"request": _json, "response": _json}),
    st.fixed_dictionaries({"request": st.fixed_dictionaries({"input": _json, "tools": _json})}),
    st.fixed_dictionaries(
        {
            "response": st.fixed_dictionaries(
                {"object": st.just("response"), "output": _json, "status": _json}
            )
        }
    ),
    st.fixed_dictionaries(
        {
            "fields": st.dictionaries(
                st.sampled_from(
                    [
                        "messages",
                        "tool_calls",
                        "request",
                        "final_answer",
                        "available_tools",
                        "available_tool_snapshots",
                    ]
                ),
                _json,
            )
        },
        optional={"issues": _json},
    ),
    st.fixed_dictionaries(
        {
            "messages": st.lists(
                st.fixed_dictionaries(
                    {
                        "role": _roles,
                        "content": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "type": st.sampled_from(
                                        ["tool_use", "tool_result", "text", "thinking", "image"]
                                    ),
                                    "id": _json,
                                    "tool_use_id": _json,
                                    "input": _json,
                                    "text": _json,
                                    "content": _json,
                                    "is_error": _json,
                                }
                            ),
                            max_size=3,
                        ),
                    }
                ),
                max_size=4,
            )
        }
    ),
    st.fixed_dictionaries(
        {
            "resourceSpans": st.lists(
                st.fixed_dictionaries(
                    {
                        "scopeSpans": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "spans": st.lists(
                                        st.fixed_dictionaries(
                                            {
                                                "traceId": st.sampled_from(
                                                    [
                                                        "5b8aa5a2d2c872e8321cf37308d69df2",
                                                        "W4qlotLIcugyHPNzCNad8g==",
                                                        "zz",
                                                    ]
                                                ),
                                                "spanId": st.sampled_from(
                                                    ["051581bf3cb55c13", "7a2b000000000001"]
                                                ),
                                                "attributes": _json,
                                                "parentSpanId": _json,
                                                "status": _json,
                                                "startTimeUnixNano": _json,
                                            }
                                        ),
                                        max_size=3,
                                    )
                                }
                            ),
                            max_size=2,
                        )
                    }
                ),
                max_size=2,
            )
        }
    ),
)


_chunks = st.lists(
    st.fixed_dictionaries(
        {
            "id": _json,
            "created": _json,
            "choices": st.lists(
                st.fixed_dictionaries(
                    {
                        "index": st.one_of(st.just(0), _json),
                        "finish_reason": _json,
                        "delta": st.fixed_dictionaries(
                            {
                                "content": _json,
                                "tool_calls": st.lists(
                                    st.fixed_dictionaries(
                                        {
                                            "index": st.one_of(st.integers(0, 2), _json),
                                            "id": _json,
                                            "function": _json,
                                        }
                                    ),
                                    max_size=2,
                                ),
                            }
                        ),
                    }
                ),
                max_size=2,
            ),
        }
    ),
    max_size=4,
)
_observation = st.fixed_dictionaries(
    {
        "id": st.one_of(st.sampled_from(["o1", "o2", "o3"]), _json),
        "traceId": st.sampled_from(["t1", "t2"]),
        "type": st.one_of(st.sampled_from(["GENERATION", "TOOL", "SPAN", "AGENT"]), _json),
        "parentObservationId": st.one_of(st.sampled_from(["o1", "gone"]), _json),
        "startTime": st.one_of(st.just("2026-01-01T00:00:00Z"), _json),
        "endTime": _json,
        "input": st.one_of(
            st.fixed_dictionaries({"messages": st.lists(_json, max_size=2), "tools": _json}),
            _json,
        ),
        "output": _json,
        "level": _json,
        "metadata": _json,
        "name": _json,
    }
)
_streams_and_langfuse = st.one_of(
    st.fixed_dictionaries(
        {
            "request": st.fixed_dictionaries(
                {"messages": st.lists(_json, max_size=2), "tools": _json}
            ),
            "chunks": _chunks,
        }
    ),
    st.fixed_dictionaries(
        {"id": st.sampled_from(["t1", "t2"]), "observations": st.lists(_observation, max_size=4)}
    ),
    st.fixed_dictionaries({"data": st.lists(_observation, min_size=1, max_size=4)}),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_streams_and_langfuse, min_size=1, max_size=3))
def test_stream_and_langfuse_shapes_never_crash(records: list[Any]) -> None:
    """Chunk lists and Langfuse traces/pages with garbage inside never crash an importer."""
    snapshots, report = _read(records)
    _check(snapshots, report, len(records))
    assert all(r.code != "IMPORTER_ERROR" for r in report.rejected), report.rejected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_wrapped, min_size=1, max_size=3))
def test_other_formats_never_crash(records: list[Any]) -> None:
    """Responses, Anthropic, fields and OTLP shapes with garbage inside never crash."""
    snapshots, report = _read(records)
    _check(snapshots, report, len(records))
