"""Frozen JSON values and the canonical serialization every comparison and id uses.

Why canonical JSON instead of ``==``: Python's ``True == 1 == 1.0`` would merge states
that the reference (Java) implementation keeps apart, so equality, sizes and content
hashes all go through :func:`canonical_json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, TypeAlias

from pydantic import BeforeValidator, PlainSerializer

__all__ = ["FrozenJson", "JsonValue", "canonical_json", "freeze", "json_size", "thaw"]

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


def _dumps(value: object, *, sort_keys: bool) -> str:
    return json.dumps(
        value,
        sort_keys=sort_keys,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_default,
    )


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name} is not JSON")


def _freeze_loaded(value: Any) -> JsonValue:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze_loaded(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze_loaded(v) for v in value)
    return value


def freeze(value: object) -> JsonValue:
    """Deep-copy ``value`` through a JSON round trip into read-only mappings and tuples.

    Raises ``ValueError`` for anything that is not JSON (NaN, infinities, sets, objects).
    """
    try:
        text = _dumps(value, sort_keys=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value is not JSON-serializable ({type(exc).__name__})") from None
    return _freeze_loaded(json.loads(text, parse_constant=_reject_constant))


_SCALARS = (str, int, float, bool, type(None))


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
        return _dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value is not JSON-serializable ({type(exc).__name__})") from None


def json_size(value: object) -> int:
    """Size of the compact JSON in UTF-16 code units (parity with the Java reference)."""
    text = _dumps(value, sort_keys=False)
    return len(text.encode("utf-16-le")) // 2


FrozenJson = Annotated[
    JsonValue,
    BeforeValidator(freeze),
    PlainSerializer(thaw, return_type=Any),
]
"""Pydantic field type: any JSON value, deep-copied and frozen on the way in."""
