"""trajectory_match (docs/semantics.md §5.2): deterministic multiset comparison, never the judge."""

from __future__ import annotations

from typing import Any

import pytest

from tests.evaluation.order42 import order42_trace
from worker.evaluation import MatchMode, Metric, MetricResult, Status, Trace, thaw, trajectory_match


def calls(*names: str, **arguments: Any) -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "name": n, "arguments": arguments} for i, n in enumerate(names)]


def outcome(mode: MatchMode, actual: Any, expected: Any, match_arguments: bool = False) -> bool:
    trace = Trace.from_fields("t", {"tool_calls": actual, "expected_tool_calls": expected})
    result = trajectory_match(mode, match_arguments).precheck(trace)
    assert result.status is Status.DECIDED
    assert result.passed is (result.score == 1.0)
    return bool(result.passed)


def test_id_and_version() -> None:
    """The id is always trajectory_match; the version names mode and argument flag."""
    metric = trajectory_match(MatchMode.UNORDERED, True)
    assert metric.id == "trajectory_match"
    assert metric.version == "jevals-e9fb26a-as1-0-1-UNORDERED-args=true"
    assert trajectory_match(MatchMode.STRICT, False).version.endswith("-STRICT-args=false")
    assert isinstance(metric, Metric)


def test_match_mode_is_a_str_enum_of_four() -> None:
    """MatchMode values equal their names: STRICT, UNORDERED, SUBSET, SUPERSET."""
    assert [m.value for m in MatchMode] == ["STRICT", "UNORDERED", "SUBSET", "SUPERSET"]
    assert MatchMode.SUBSET == "SUBSET"


def test_mode_may_be_given_by_name() -> None:
    """A mode name (any case) is accepted; an unknown one is a ValueError."""
    assert trajectory_match("subset").mode is MatchMode.SUBSET
    with pytest.raises(ValueError, match="mode"):
        trajectory_match("fuzzy")


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_match_arguments_must_be_bool(flag: Any) -> None:
    """match_arguments is a real bool."""
    with pytest.raises(ValueError, match="match_arguments"):
        trajectory_match(MatchMode.STRICT, flag)


def test_never_asks_the_judge() -> None:
    """No state and no questions; precheck returns the final DECIDED result."""
    metric = trajectory_match(MatchMode.STRICT)
    trace = order42_trace()
    assert (dict(metric.state(trace)), dict(metric.questions(trace))) == ({}, {})
    result = metric.precheck(trace)
    assert (result.status, result.score, result.passed, result.reason) == (
        Status.DECIDED,
        1.0,
        True,
        "STRICT",
    )
    assert thaw(result.evidence) == {"actual_count": 1, "expected_count": 1}
    assert metric.reduce({}, trace) == result


@pytest.mark.parametrize("missing", ["tool_calls", "expected_tool_calls"])
def test_missing_fields_skip(missing: str) -> None:
    """Both tool_calls and expected_tool_calls are required (MISSING_FIELDS otherwise)."""
    trace = order42_trace().with_field(missing, None)
    assert trajectory_match(MatchMode.UNORDERED).precheck(trace) == MetricResult.skipped(
        "MISSING_FIELDS"
    )


def test_two_empty_lists_pass_strict() -> None:
    """Empty actual and expected lists are present ([] counts) and match under STRICT."""
    assert outcome(MatchMode.STRICT, [], [])


def test_failure_scores_zero_with_counts() -> None:
    """A mismatch is DECIDED, score 0.0, passed False, reason = mode, counts in evidence."""
    trace = Trace.from_fields(
        "t", {"tool_calls": calls("a", "b"), "expected_tool_calls": ["a", "c", "d"]}
    )
    result = trajectory_match(MatchMode.SUPERSET).precheck(trace)
    assert (result.status, result.score, result.passed, result.reason) == (
        Status.DECIDED,
        0.0,
        False,
        "SUPERSET",
    )
    assert thaw(result.evidence) == {"actual_count": 2, "expected_count": 3}


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [(["a", "b"], ["a", "b"], True), (["b", "a"], ["a", "b"], False), (["a"], ["a", "a"], False)],
)
def test_strict_needs_same_order_and_length(
    actual: list[str], expected: list[str], ok: bool
) -> None:
    """STRICT: identical lists (order and length)."""
    assert outcome(MatchMode.STRICT, calls(*actual), expected) is ok


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        (["b", "a"], ["a", "b"], True),
        (["a", "a"], ["a"], False),
        (["a"], ["a", "a"], False),
        (["a", "b", "a"], ["a", "a", "b"], True),
    ],
)
def test_unordered_compares_multisets(actual: list[str], expected: list[str], ok: bool) -> None:
    """UNORDERED: same calls with the same counts, any order."""
    assert outcome(MatchMode.UNORDERED, calls(*actual), expected) is ok


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        (["a"], ["a", "b"], True),
        (["a", "a"], ["a", "b"], False),
        (["a", "a"], ["a", "a", "b"], True),
        (["c"], ["a"], False),
    ],
)
def test_subset_needs_an_expected_copy_per_actual_call(
    actual: list[str], expected: list[str], ok: bool
) -> None:
    """SUBSET: each actual call (duplicates included) needs its own expected copy."""
    assert outcome(MatchMode.SUBSET, calls(*actual), expected) is ok


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        (["a", "b", "c"], ["a", "b"], True),
        (["a", "b"], ["a", "a"], False),
        (["a", "a", "b"], ["a", "a"], True),
    ],
)
def test_superset_needs_an_actual_copy_per_expected_call(
    actual: list[str], expected: list[str], ok: bool
) -> None:
    """SUPERSET: each expected call (duplicates included) needs its own actual copy."""
    assert outcome(MatchMode.SUPERSET, calls(*actual), expected) is ok


def test_duplicate_actual_calls_are_not_collapsed() -> None:
    """Two identical lookups against one expected: fails STRICT (score 0) and SUBSET."""
    actual = calls("lookup", "lookup")
    assert not outcome(MatchMode.STRICT, actual, ["lookup"])
    assert not outcome(MatchMode.SUBSET, actual, ["lookup"])
    assert outcome(MatchMode.SUPERSET, actual, ["lookup"])


def test_arguments_ignored_without_the_flag() -> None:
    """With match_arguments False only names are compared."""
    actual = calls("lookup", order_id=42)
    assert outcome(MatchMode.STRICT, actual, [{"name": "lookup", "arguments": {"order_id": 7}}])


def test_arguments_key_order_is_irrelevant() -> None:
    """Arguments compare as JSON maps: key order does not matter, nesting does."""
    actual = [{"name": "f", "arguments": {"a": 1, "b": {"x": [1, 2], "y": None}}}]
    expected = [{"name": "f", "arguments": {"b": {"y": None, "x": [1, 2]}, "a": 1}}]
    assert outcome(MatchMode.STRICT, actual, expected, match_arguments=True)
    reordered_list = [{"name": "f", "arguments": {"a": 1, "b": {"x": [2, 1], "y": None}}}]
    assert not outcome(MatchMode.STRICT, actual, reordered_list, match_arguments=True)


@pytest.mark.parametrize(("left", "right"), [(1, 1.0), (1, True), (1.0, True), (0, False)])
def test_argument_value_types_matter(left: Any, right: Any) -> None:
    """1, 1.0 and true are different argument values (canonical JSON, as in Java)."""
    actual = [{"name": "f", "arguments": {"v": left}}]
    expected = [{"name": "f", "arguments": {"v": right}}]
    assert not outcome(MatchMode.UNORDERED, actual, expected, match_arguments=True)
    assert outcome(MatchMode.UNORDERED, actual, actual, match_arguments=True)


def test_string_expected_entry_means_no_arguments() -> None:
    """A string expected entry is {name, arguments: {}}."""
    assert outcome(MatchMode.STRICT, calls("ping"), ["ping"], match_arguments=True)
    assert not outcome(MatchMode.STRICT, calls("ping", host="a"), ["ping"], match_arguments=True)


def test_missing_or_null_arguments_mean_empty() -> None:
    """A call or expectation without arguments (or with null) compares as {}."""
    actual = [{"id": "c1", "name": "now"}, {"id": "c2", "name": "now", "arguments": None}]
    expected = [{"name": "now", "arguments": {}}, {"name": "now"}]
    assert outcome(MatchMode.STRICT, actual, expected, match_arguments=True)


def test_order42_actual_call_matches_its_gold_with_arguments() -> None:
    """The order-42 call lookup_order({"order_id": 42}) matches the same gold with arguments."""
    gold = [{"name": "lookup_order", "arguments": {"order_id": 42}}]
    trace = order42_trace().with_field("expected_tool_calls", gold)
    assert trajectory_match(MatchMode.STRICT, True).precheck(trace).passed is True


@pytest.mark.parametrize("bad", [[42], [{"arguments": {}}], [{"name": 3}]])
def test_malformed_expected_entry_is_a_definition_error(bad: Any) -> None:
    """An expected entry that is neither a name nor an object with a name raises ValueError."""
    trace = Trace.from_fields("t", {"tool_calls": calls("a"), "expected_tool_calls": bad})
    with pytest.raises(ValueError, match="expected_tool_calls"):
        trajectory_match(MatchMode.STRICT).precheck(trace)
