"""Snapshot ids under arbitrary sends: how a unit was sent never changes its id; what is
evaluated (content, unit, window, catalog, labels, metric set, redaction) always does."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producer.snapshot import PROVENANCE_FIELDS, Snapshot, content_id
from tests.properties.strategies import examples
from tests.queue.queue_kit import example_snapshots
from worker.canonical_json import frozen_json
from worker.store import SnapshotRecord, SnapshotText

FAST = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@cache
def _wires() -> tuple[dict[str, Any], ...]:
    """The shipped examples' wire forms (they carry tools, tool rounds, windows, slices)."""
    return tuple(s.wire() for s in example_snapshots().values())


_LANES = st.sampled_from(["live", "backfill"])
_RATES = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False)
_RULES = st.one_of(
    st.sampled_from(["all", "default", "half", "canary"]),
    st.text(min_size=1, max_size=20).map(lambda t: f"backfill:{t}"),
    st.text(min_size=1, max_size=20).map(lambda t: f"backfill:bf-1/{t}"),
)


@st.composite
def _provenance(draw: st.DrawFn) -> dict[str, Any]:
    rate = draw(_RATES)
    sampling = {"lane": draw(_LANES), "rate": rate, "weight": 1 / rate, "rule": draw(_RULES)}
    source = draw(st.one_of(st.none(), st.sampled_from(["openai_chat", "otlp", "langsmith"])))
    otel = draw(st.one_of(st.none(), st.just({"trace_id": "1" * 32, "span_id": "2" * 16})))
    return {"sampling": sampling, "source": source, "otel": otel}


def _ids(wire: dict[str, Any]) -> set[str]:
    """Every place the id is computed: the contract, the store's record and the worker's text."""
    snapshot = Snapshot.model_validate(wire)
    return {
        snapshot.snapshot_id,
        content_id(snapshot.wire()),
        SnapshotRecord(content=snapshot.wire()).snapshot_id,
        SnapshotText.from_wire(snapshot.wire()).snapshot_id,
    }


@FAST
@given(index=st.integers(min_value=0), first=_provenance(), second=_provenance())
def test_the_id_ignores_lane_backfill_id_sampling_source_and_otel_ids(
    index: int, first: dict[str, Any], second: dict[str, Any]
) -> None:
    """The same unit on any lane, backfill id, rate, rule, importer or OTel ids has one id."""
    wire = _wires()[index % len(_wires())]
    ids = _ids({**wire, **first}) | _ids({**wire, **second})
    assert len(ids) == 1
    assert {"sampling", "source", "otel"} == PROVENANCE_FIELDS


def _event_text(wire: dict[str, Any], text: str) -> dict[str, Any]:
    events = [dict(e) for e in wire["events"]]
    first = next(i for i, e in enumerate(events) if e.get("text"))
    events[first]["text"] = events[first]["text"] + text
    return {**wire, "events": events}


def _unit(wire: dict[str, Any], text: str) -> dict[str, Any]:
    return {**wire, "unit": {**wire["unit"], "event_id": f"{wire['unit'].get('event_id')}{text}"}}


def _window(wire: dict[str, Any], text: str) -> dict[str, Any]:
    cutoff = "2030-01-01T00:00:00Z" if wire["window"].get("cutoff_time") is None else None
    return {**wire, "window": {**wire["window"], "cutoff_time": cutoff}}


def _catalog(wire: dict[str, Any], text: str) -> dict[str, Any]:
    tool = {"name": f"lookup_{len(text)}", "description": text, "parameters": {}}
    return {**wire, "tools": [*(wire.get("tools") or []), tool]}


def _labels(wire: dict[str, Any], text: str) -> dict[str, Any]:
    return {**wire, "labels": {**wire["labels"], f"metric_{text}": {"passed": True}}}


def _metric_set(wire: dict[str, Any], text: str) -> dict[str, Any]:
    return {**wire, "metric_set": wire["metric_set"] + "+" + text}


def _redaction(wire: dict[str, Any], text: str) -> dict[str, Any]:
    return {**wire, "redaction": f"{wire.get('redaction')}/{text}"}


_CHANGES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "content": _event_text,
    "unit": _unit,
    "window": _window,
    "catalog": _catalog,
    "labels": _labels,
    "metric_set": _metric_set,
    "redaction": _redaction,
}
_SUFFIX = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)


@FAST
@given(
    index=st.integers(min_value=0),
    change=st.sampled_from(sorted(_CHANGES)),
    suffix=_SUFFIX,
    provenance=_provenance(),
)
def test_the_id_follows_content_unit_window_catalog_labels_and_metric_set(
    index: int, change: str, suffix: str, provenance: dict[str, Any]
) -> None:
    """Any change to what is evaluated gives another id, whatever the provenance."""
    wire = _wires()[index % len(_wires())]
    changed = _CHANGES[change](wire, suffix)
    (before,) = _ids(wire)
    (after,) = _ids({**changed, **provenance})
    assert before != after, change


def _string_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of the string leaves of a JSON value."""
    if isinstance(value, str):
        return [prefix]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _string_paths(v, (*prefix, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _string_paths(v, (*prefix, i))]
    return []


def _with(value: Any, path: tuple[Any, ...], leaf: Any) -> Any:
    if not path:
        return leaf
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _with(value[head], rest, leaf)}
    return [_with(v, rest, leaf) if i == head else v for i, v in enumerate(value)]


_LEAVES = st.one_of(
    st.text(max_size=40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**70), max_value=2**70),
)


@FAST
@given(index=st.integers(min_value=0), choice=st.integers(min_value=0), leaf=_LEAVES)
def test_the_fast_id_of_a_validated_snapshot_is_the_canonical_one(
    index: int, choice: int, leaf: Any
) -> None:
    """orjson's id text of a validated snapshot equals the standard library's for any event leaf."""
    # validated=True is the worker's and Snapshot's path; leaves are any text or number.
    wire = _wires()[index % len(_wires())]
    paths = [p for p in _string_paths(wire) if p[0] == "events"]
    changed = _with(wire, paths[choice % len(paths)], leaf)
    try:
        snapshot = Snapshot.model_validate(changed)
    except ValueError:  # pydantic's ValidationError: that field does not take this leaf
        return
    validated = snapshot.wire()
    assert content_id(validated, validated=True) == content_id(validated)
    text = SnapshotText.from_wire(validated, frozen_json(validated))
    assert text.snapshot_id == content_id(validated) == snapshot.snapshot_id
