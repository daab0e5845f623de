"""Frozen JSON: the walk that replaced the JSON round trip gives exactly the round trip's value."""

from __future__ import annotations

import enum
import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker._json import canonical_json, compact_json, freeze, json_size, utf16_units


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
