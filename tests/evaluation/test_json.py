"""Frozen JSON: the walk that replaced the JSON round trip gives exactly the round trip's value."""

from __future__ import annotations

import enum
import json
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.canonical_json import (
    canonical_json,
    compact_json,
    freeze,
    freeze_reusing,
    frozen_json,
    json_size,
    utf16_units,
)


class _Number(enum.IntEnum):
    ONE = 1


class _Word(str, enum.Enum):  # noqa: UP042 - str() differs from the value: the case at stake
    X = "x"


def _round_trip(value: object) -> Any:
    """The previous definition of ``freeze``: print, parse, make read-only."""
    try:
        text = json.dumps(
            value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_plain
        )
    except TypeError as exc:
        raise ValueError("not JSON") from exc
    return _read_only(json.loads(text))


def _plain(value: object) -> object:
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise TypeError(type(value).__name__)


def _read_only(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _read_only(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_read_only(v) for v in value)
    return value


_KEYS = st.one_of(
    st.text(max_size=6), st.integers(), st.floats(), st.booleans(), st.none(), st.just(_Word.X)
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.just(_Number.ONE),
    st.just(_Word.X),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=4),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(MappingProxyType),
    ),
    max_leaves=25,
)


def _outcome(function: Any, value: object) -> tuple[str, Any]:
    try:
        return "ok", function(value)
    except ValueError:
        return "refused", None


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_freeze_equals_the_json_round_trip(value: object) -> None:
    """Same value, same types, same key order, same refusals (NaN, infinities) as print+parse."""
    expected, got = _outcome(_round_trip, value), _outcome(freeze, value)
    assert got[0] == expected[0]
    assert repr(got[1]) == repr(expected[1])


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_compact_json_has_the_canonical_length(value: object) -> None:
    """Key order never changes a size: compact and canonical texts are equally long."""
    try:
        canonical = canonical_json(value)
    except ValueError:
        return
    assert len(compact_json(value)) == len(canonical)
    assert json_size(value) == utf16_units(canonical)


# Floats in every decade, those where orjson and Python print exponents differently included.
_AWKWARD_FLOATS = st.builds(
    lambda mantissa, exponent: mantissa * 10.0**exponent,
    st.floats(-10, 10, allow_nan=False),
    st.integers(-330, 307),
).filter(math.isfinite)
_AWKWARD_TEXT = st.text(
    st.characters(codec="utf-8") | st.sampled_from('\x00\x1f\x7f\u2028\\"/0.0000e-5'), max_size=12
)
_FROZEN = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),  # beyond 64 bits too
        _AWKWARD_FLOATS,
        st.floats(allow_nan=False, allow_infinity=False),
        _AWKWARD_TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_AWKWARD_TEXT, inner, max_size=4),
    ),
    max_leaves=30,
).map(freeze)


@settings(max_examples=1500, deadline=None)
@given(_FROZEN)
def test_frozen_json_writes_the_canonical_text(value: object) -> None:
    """orjson's text of a frozen value is canonical_json's (compact_json's), to the character."""
    assert frozen_json(value) == canonical_json(value)
    assert frozen_json(value, sort_keys=False) == compact_json(value)


@pytest.mark.parametrize(
    "value",
    [1e-5, -3.5e-7, 1e-9, 9.99e-10, 1e16, 1.5e-300, 2**64, -(2**70), "0.00001", "\ud800x", -0.0],
)
def test_frozen_json_takes_the_exact_path_where_orjson_differs(value: object) -> None:
    """Small exponents, big integers and lone surrogates come out as json.dumps writes them."""
    frozen = freeze({"v": [value]})
    expected = json.dumps({"v": [value]}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert frozen_json(frozen) == expected


def test_freeze_refuses_what_is_not_json() -> None:
    """Sets, objects, non-finite numbers and cycles are ValueErrors, never partial copies."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for bad in ({1, 2}, object(), float("nan"), {"k": float("inf")}, cyclic, {(1, 2): "v"}):
        with pytest.raises(ValueError, match=r"JSON|nested|keys"):
            freeze(bad)


def test_utf16_units_counts_astral_characters_twice() -> None:
    """Sizes are Java String lengths: one unit per BMP character, two per astral one."""
    assert utf16_units("abc") == 3
    assert utf16_units("é") == 1
    assert utf16_units("😀") == 2


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_freeze_reusing_equals_freeze_on_fresh_values(value: object) -> None:
    """Dicts, lists and scalars are frozen exactly as freeze does (types, order, refusals)."""
    expected, got = _outcome(freeze, value), _outcome(freeze_reusing, _fresh(value))
    assert got[0] == expected[0]
    assert repr(got[1]) == repr(expected[1])


def _fresh(value: object) -> object:
    """``value`` with its mapping proxies and tuples turned into dicts and lists."""
    if isinstance(value, MappingProxyType | dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_fresh(v) for v in value]
    return value


def test_freeze_reusing_keeps_frozen_parts_and_copies_the_rest() -> None:
    """Frozen mappings and tuples inside are the same objects; the dicts around them are new."""
    arguments, items = freeze({"order_id": 42}), freeze([1, "two"])
    outer = {"call": {"arguments": arguments, "items": items}, "names": ["a", _Word.X]}
    frozen = freeze_reusing(outer)
    assert frozen["call"]["arguments"] is arguments
    assert frozen["call"]["items"] is items
    assert repr(frozen) == repr(freeze(outer))
    assert type(frozen["names"][1]) is str  # subclasses become plain values, as freeze does


def test_freeze_reusing_refuses_what_is_not_json() -> None:
    """Non-finite numbers, sets and cycles in the fresh parts are ValueErrors, as in freeze."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for bad in ({"k": float("inf")}, [float("nan")], {"s": {1}}, cyclic):
        with pytest.raises(ValueError, match=r"JSON|nested"):
            freeze_reusing(bad)
