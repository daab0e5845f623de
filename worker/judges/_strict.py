"""Strict JSON reading and the small value rules shared by the judges (docs/semantics.md §7.5).

Python's ``json`` is lenient where the reference (Jackson, strict settings) is not: it accepts
duplicate keys (last wins), ``NaN``/``Infinity``, overflowing floats (``1e999`` becomes ``inf``) and
treats ``True`` as the number 1. Everything here refuses those, so a reply means exactly one thing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from worker.canonical_json import JsonValue, thaw

from ._wire import Usage

__all__ = [
    "INT64_MAX",
    "StrictJsonError",
    "check_model",
    "content_text",
    "is_number",
    "read_count",
    "read_usage",
    "strict_loads",
]

INT64_MAX = 2**63 - 1
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's four whitespace characters, nothing else


class StrictJsonError(ValueError):
    """Text that is not exactly one strict JSON value. The message never quotes the text."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise StrictJsonError("duplicate key")
    return result


def _no_constant(_name: str) -> float:
    raise StrictJsonError("non-finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e999" parses to inf without parse_constant seeing it
        raise StrictJsonError("non-finite number")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite_float
)


def strict_loads(text: str) -> Any:
    """Parse exactly one JSON value; duplicates, non-finite numbers and trailing data are errors."""
    start = _WHITESPACE.match(text, 0)
    try:
        value, end = _DECODER.raw_decode(text, start.end() if start else 0)
    except (ValueError, RecursionError):  # JSONDecodeError, huge ints, absurd nesting
        raise StrictJsonError("not strict JSON") from None
    tail = _WHITESPACE.match(text, end)
    if tail is None or tail.end() != len(text):
        raise StrictJsonError("trailing data")
    return value


def is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number: ``int`` or ``float`` but never ``bool`` (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_count(value: object) -> int | None:
    """A token count: a JSON integer (not a bool) in ``[0, 2**63-1]``; anything else is ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX:
        return value
    return None


def read_usage(raw: object, input_key: str, output_key: str) -> Usage | None:
    """Usage from a parsed object when *both* counts are valid, else ``None`` (unknown)."""
    if not isinstance(raw, Mapping):
        return None
    input_tokens = read_count(raw.get(input_key))
    output_tokens = read_count(raw.get(output_key))
    if input_tokens is None or output_tokens is None:
        return None
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens)


def check_model(model: object) -> str:
    """A judge's model name: a non-blank string, else ValueError."""
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must be a non-blank string")
    return model


def content_text(content: JsonValue) -> str:
    """The string form of question content: a string is itself, anything else compact JSON."""
    if isinstance(content, str):
        return content
    return json.dumps(thaw(content), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
