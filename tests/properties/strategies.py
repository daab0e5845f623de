"""Hypothesis strategies shared by the bad-input properties: JSON values and mutations.

Mutations start from real inputs (the committed importer fixtures, the shipped example
snapshots) so that the bad values sit deep inside otherwise valid structure, where parsers have
the most code paths left to get wrong.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "examples",
    "json_values",
    "mutate_json",
    "mutate_lines",
    "nasty_text",
    "paths_of",
]


def examples(count: int) -> int:
    """``count`` scaled by ``EVALQ_TEST_PROPERTY_SCALE`` (default 1): CI fast, a hunt deep."""
    return count * max(1, int(os.environ.get("EVALQ_TEST_PROPERTY_SCALE", "1")))


nasty_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\ud800",  # a lone surrogate: valid in Python, not encodable as UTF-8
            "\u202e",
            "💥" * 3,
            "NaN",
            "null",
            "0" * 40,
            "a" * 300,
            '{"nested": "json in a string"}',
        ]
    ),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    nasty_text,
)
json_values: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(nasty_text, inner, max_size=4),
    max_leaves=12,
)
"""Any JSON-ish value, including the non-finite floats a lenient encoder would write."""


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) into ``value``, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths_of(item, (*prefix, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], change: Callable[[Any], Any]) -> Any:
    if not path:
        return change(value)
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        copy[head] = _replace(value[head], rest, change)
        return copy
    copy_list = list(value)
    copy_list[head] = _replace(value[head], rest, change)
    return copy_list


_DELETE = object()


def _drop_marked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_marked(v) for k, v in value.items() if v is not _DELETE}
    if isinstance(value, list):
        return [_drop_marked(v) for v in value if v is not _DELETE]
    return value


@st.composite
def mutate_json(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one to three edits at random paths (replace, delete, retype, wrap)."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths_of(value)))
        kind = draw(st.sampled_from(["replace", "delete", "retype", "wrap", "empty"]))
        if kind == "delete" and path:
            value = _drop_marked(_replace(value, path, _mark_deleted))
        elif kind == "replace":
            value = _replace(value, path, _constant(draw(json_values)))
        else:
            value = _replace(value, path, {"retype": _retype, "wrap": _wrap}.get(kind, _empty))
    return value


def _mark_deleted(_old: Any) -> Any:
    return _DELETE


def _constant(new: Any) -> Callable[[Any], Any]:
    def change(_old: Any) -> Any:
        return new

    return change


def _wrap(old: Any) -> Any:
    return [old]


def _empty(old: Any) -> Any:
    return type(old)() if isinstance(old, dict | list | str) else None


def _retype(old: Any) -> Any:
    """A value of another JSON type that a sloppy exporter might have written instead."""
    if isinstance(old, bool):
        return str(old).lower()
    if isinstance(old, int | float):
        return str(old) if math.isfinite(old) else None
    if isinstance(old, str):
        return len(old)
    if isinstance(old, list):
        return {str(i): v for i, v in enumerate(old)}
    if isinstance(old, dict):
        return list(old.values())
    return 0


def _dumps(value: Any) -> str:
    # allow_nan: a broken exporter writes NaN; ensure_ascii=False keeps lone surrogates raw.
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


@st.composite
def mutate_lines(draw: st.DrawFn, lines: list[str], *, bytes_too: bool = True) -> bytes:
    """A file's lines with JSON-level, line-level and (``bytes_too``) byte-level damage."""
    lines = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["json", "json", "json", "truncate", "dup", "drop", "swap"]))
        if kind == "json":
            try:
                parsed = json.loads(lines[index])
            except ValueError:  # already damaged by an earlier edit
                continue
            lines[index] = _dumps(draw(mutate_json(parsed)))
        elif kind == "truncate":
            lines[index] = lines[index][: draw(st.integers(0, max(0, len(lines[index]) - 1)))]
        elif kind == "dup":
            lines.insert(index, lines[index])
        elif kind == "drop" and len(lines) > 1:
            del lines[index]
        elif kind == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
    data = "\n".join(lines).encode("utf-8", "surrogatepass" if bytes_too else "replace") + b"\n"
    if bytes_too and draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\xff", b"\x00", b"\xc3", b"\r", b"\n\n", b"\xef\xbb\xbf"]))
        data = data[:at] + junk + data[at:]
    return data
