"""The strict JSON reader behind both HTTP judges (docs/semantics.md §7.5 rule 1)."""

from __future__ import annotations

import pytest

from worker.judges import Usage
from worker.judges._strict import (
    INT64_MAX,
    StrictJsonError,
    content_text,
    read_count,
    read_usage,
    strict_loads,
)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a": {"b": 1, "b": 1}}',
        '[{"x": 0, "x": 0}]',
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": -Infinity}',
        '{"a": 1e999}',
        '{"a": 1} {"b": 2}',
        '{"a": 1} x',
        '{"a": 1}\u00a0',
        "",
        "   ",
        "{'a': 1}",
        '{"a": 1,}',
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_rejects_non_strict_json(text: str) -> None:
    """Duplicate keys anywhere, NaN/Infinity/overflow, trailing data and non-JSON are errors."""
    with pytest.raises(StrictJsonError):
        strict_loads(text)


def test_accepts_json_whitespace_around_one_value() -> None:
    """Leading and trailing JSON whitespace (space, tab, CR, LF) is fine."""
    assert strict_loads(' \t\r\n{"a": [1, 2.5, null, true]} \n') == {"a": [1, 2.5, None, True]}


def test_error_never_quotes_the_text() -> None:
    """The error message does not repeat the input (it may be raw model output)."""
    with pytest.raises(StrictJsonError) as caught:
        strict_loads('{"secret-content": 1, "secret-content": 2}')
    assert "secret-content" not in str(caught.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (7, 7),
        (INT64_MAX, INT64_MAX),
        (INT64_MAX + 1, None),
        (-1, None),
        (True, None),
        (1.0, None),
        ("3", None),
        (None, None),
    ],
)
def test_token_counts_are_int64_integers(value: object, expected: int | None) -> None:
    """A count is a JSON integer in [0, 2**63-1]; bools, floats, strings are not counts."""
    assert read_count(value) == expected


def test_usage_needs_both_counts() -> None:
    """Usage is known only when both counts are valid; otherwise it is None (unknown)."""
    assert read_usage({"in": 3, "out": 4}, "in", "out") == Usage(input_tokens=3, output_tokens=4)
    assert read_usage({"in": 3}, "in", "out") is None
    assert read_usage({"in": 3, "out": -4}, "in", "out") is None
    assert read_usage([3, 4], "in", "out") is None


def test_content_text_string_form() -> None:
    """A string stays itself; other content becomes compact JSON in insertion order."""
    assert content_text("as is") == "as is"
    assert content_text({"b": 1, "a": ["é", None]}) == '{"b":1,"a":["é",null]}'
