"""Frozen JSON values and the canonical serialization every comparison and id uses.

Why canonical JSON instead of ``==``: Python's ``True == 1 == 1.0`` would merge states
that the reference (Java) implementation keeps apart, so equality, sizes and content
hashes all go through :func:`canonical_json`.

:func:`freeze` gives exactly what a JSON round trip (``json.loads(json.dumps(v))``) would,
frozen, but walks the value once instead of printing and parsing it: it was the largest single
cost of a worker (measured: ~30% of the CPU per snapshot went to round trips).

A public module of its own, light (orjson and pydantic only): the producer's contract hashes
snapshots with the very text the worker compares with, so both sides import it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, TypeAlias

import orjson
from pydantic import BeforeValidator, PlainSerializer

__all__ = [
    "FrozenJson",
    "JsonValue",
    "canonical_json",
    "compact_json",
    "freeze",
    "freeze_reusing",
    "frozen_json",
    "json_size",
    "key_json",
    "thaw",
    "utf16_units",
]

JsonValue: TypeAlias = Any
"""A JSON value: None, bool, int, float, str, tuple of values or read-only mapping."""


def _default(value: object) -> object:
    # Exact-type test first: frozen values are MappingProxyType, and the ABC check below costs
    # more than the encoding itself (measured: ~10% of a worker's CPU went to ABC checks).
    if type(value) is MappingProxyType:
        return value.copy()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def _encoder(*, sort_keys: bool) -> Callable[[object], str]:
    # One encoder per flavour, built once: json.dumps with keyword arguments builds a new
    # JSONEncoder (and its C scanner) on every call.
    encoder = json.JSONEncoder(
        sort_keys=sort_keys,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_default,
    )
    return encoder.encode


_compact = _encoder(sort_keys=False)
_canonical = _encoder(sort_keys=True)

_SCALARS = (str, int, float, bool, type(None))


def _key(key: object) -> str:
    """A mapping key as JSON prints it (json.dumps turns numbers, bools and None into text)."""
    if type(key) is str:
        return key
    if isinstance(key, str):
        return str.__str__(key)
    if key is None:
        return "null"
    if key is True or key is False:
        return "true" if key else "false"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return float.__repr__(_finite(key))
    raise ValueError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _finite(number: float) -> float:
    if not math.isfinite(number):
        raise ValueError("non-finite number is not JSON")
    return number


def _frozen(value: Any) -> JsonValue:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return _finite(value)
    if kind is dict or kind is MappingProxyType:
        return MappingProxyType(
            {k if type(k) is str else _key(k): _frozen(v) for k, v in value.items()}
        )
    if kind is tuple or kind is list:
        return tuple([_frozen(v) for v in value])
    return _frozen_subclass(value)


def _frozen_subclass(value: object) -> JsonValue:
    """Subclasses (str/int enums, dict subclasses, other mappings) as JSON would print them."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(int.__repr__(value))
    if isinstance(value, float):
        return float(float.__repr__(_finite(value)))
    if isinstance(value, Mapping):
        return MappingProxyType({_key(k): _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple([_frozen(v) for v in value])
    raise ValueError(f"not JSON-serializable: {type(value).__name__}")


def freeze(value: object) -> JsonValue:
    """Deep-copy ``value`` as a JSON round trip would, into read-only mappings and tuples.

    Raises ``ValueError`` for anything that is not JSON (NaN, infinities, sets, objects, cycles).
    """
    try:
        return _frozen(value)
    except RecursionError:
        raise ValueError("value is nested too deeply (or contains itself)") from None


_PLAIN = frozenset({str, int, bool, type(None)})  # exact types freeze returns unchanged


def freeze_reusing(value: object) -> JsonValue:
    """:func:`freeze`, except that read-only mappings and tuples are kept as they are.

    Only for values whose mappings and tuples all came out of :func:`freeze` (e.g. the
    ``FrozenJson`` fields of a validated model), mixed with fresh dicts and lists built around
    them: copying those parts again only gives an equal value (measured: the copies were ~40%
    of ``Snapshot.trace()``). A proxy over a dict someone still holds would stay mutable, and a
    tuple holding a dict would stay unchecked: pass only what :func:`freeze` returned.
    """
    try:
        return _reused(value)
    except RecursionError:
        raise ValueError("value is nested too deeply (or contains itself)") from None


def _reused(value: Any) -> JsonValue:
    # Scalars are tested inline: a call per string would cost as much as the walk it saves.
    kind = type(value)
    if kind is dict:
        return MappingProxyType(
            {
                k if type(k) is str else _key(k): v if type(v) in _PLAIN else _reused(v)
                for k, v in value.items()
            }
        )
    if kind is list:
        return tuple([v if type(v) in _PLAIN else _reused(v) for v in value])
    if kind is MappingProxyType or kind is tuple:
        return value
    return _frozen(value)


def thaw(value: JsonValue) -> Any:
    """Return a plain, mutable ``dict``/``list`` copy of a (frozen) JSON value."""
    kind = type(value)
    if kind in _SCALARS:  # exact types first: the ABC checks below are slow on hot paths
        return value
    if kind is MappingProxyType or kind is dict:
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


def canonical_json(value: object) -> str:
    """Compact JSON with sorted keys, non-ASCII unescaped, NaN rejected."""
    try:
        return _canonical(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value is not JSON-serializable ({type(exc).__name__})") from None


def compact_json(value: object) -> str:
    """Compact JSON in the value's own key order (same length as :func:`canonical_json`)."""
    try:
        return _compact(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value is not JSON-serializable ({type(exc).__name__})") from None


# Where orjson's text can differ from json.dumps's for a finite float: Python prints 1e-05 to
# 9.99e-09 with a two-digit exponent, orjson as 0.00001 or 1e-9. A string holding such text
# only sends the value down the slower, equal path. Two searches, each starting with a literal:
# one alternation scanned every position (~26 us for a 2.5 kB snapshot against ~4 us).
_SMALL_EXPONENT = re.compile(rb"e-\d(?!\d)")


def frozen_json(value: JsonValue, *, sort_keys: bool = True) -> str:
    """:func:`canonical_json` (``sort_keys=False``: :func:`compact_json`) of a value
    :func:`freeze` returned, written by orjson.

    The same text (``tests/evaluation/test_json.py`` compares them over generated values) at a
    fraction of the cost: canonical texts of states, snapshots and evidence were ~8% of a
    backfill worker's GIL time. Only for frozen values: orjson writes NaN and infinities as
    ``null`` where :func:`canonical_json` refuses them, and ``freeze`` has refused them already.
    Integers beyond 64 bits, lone surrogates and the floats orjson prints differently take
    :func:`canonical_json`'s path.
    """
    exact = canonical_json if sort_keys else compact_json
    try:
        raw = orjson.dumps(
            value, default=_default, option=orjson.OPT_SORT_KEYS if sort_keys else None
        )
    except TypeError:  # orjson.JSONEncodeError: big integers, surrogates, non-str keys
        return exact(value)
    if b"0.0000" in raw or _SMALL_EXPONENT.search(raw) is not None:
        return exact(value)
    return raw.decode()


@functools.lru_cache(maxsize=4096)
def key_json(key: str) -> str:
    """A JSON object key as compact JSON text, cached: state keys and question ids repeat in
    every request."""
    return compact_json(key)


def utf16_units(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (what Java's ``String.length()`` counts)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2  # a lone surrogate is not JSON text: ValueError


def json_size(value: object) -> int:
    """Size of the compact JSON in UTF-16 code units (parity with the Java reference)."""
    return utf16_units(_compact(value))


FrozenJson = Annotated[
    JsonValue,
    BeforeValidator(freeze),
    PlainSerializer(thaw, return_type=Any),
]
"""Pydantic field type: any JSON value, deep-copied and frozen on the way in."""
