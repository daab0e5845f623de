"""``trajectory_match``: actual vs expected tool calls, deterministically (docs/semantics.md §5.2).

Never asks the judge: ``precheck`` returns the final result. All modes count duplicates
(multisets), so each repeated actual call needs its own expected copy. With argument matching,
arguments are compared through canonical JSON: key order is irrelevant, while ``1``, ``1.0``
and ``true`` stay different values (as in the Java reference).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from worker.canonical_json import canonical_json

from ._agent import VERSION_PREFIX, JudgeFree, invalid
from ._result import MetricResult, Reason, Status, Thresholds

if TYPE_CHECKING:
    from ._trace import Trace

__all__ = ["MatchMode", "TrajectoryMatch", "trajectory_match"]

_FIXED_THRESHOLDS = Thresholds(0.0, 1.0)  # fixed and unused: the result is always 0 or 1


class MatchMode(StrEnum):
    """How the actual call list must relate to the expected one."""

    STRICT = "STRICT"  # same calls, same order, same length
    UNORDERED = "UNORDERED"  # same multiset
    SUBSET = "SUBSET"  # every actual call has its own expected copy
    SUPERSET = "SUPERSET"  # every expected call has its own actual copy


class TrajectoryMatch(JudgeFree):
    """The deterministic trajectory metric (id always ``trajectory_match``)."""

    id = "trajectory_match"
    required = ("tool_calls", "expected_tool_calls")

    def __init__(self, mode: MatchMode, match_arguments: bool) -> None:
        self._mode = mode
        self._match_arguments = match_arguments
        flag = "true" if match_arguments else "false"
        self._version = f"{VERSION_PREFIX}{_FIXED_THRESHOLDS.tag()}-{mode.value}-args={flag}"

    @property
    def version(self) -> str:
        """``jevals-e9fb26a-as1-0-1-<MODE>-args=<true|false>``."""
        return self._version

    @property
    def mode(self) -> MatchMode:
        """The comparison mode."""
        return self._mode

    @property
    def match_arguments(self) -> bool:
        """Whether arguments are part of a call's identity."""
        return self._match_arguments

    def precheck(self, trace: Trace) -> MetricResult:
        """The final result: SKIPPED ``MISSING_FIELDS`` or a DECIDED 0/1 match."""
        if not all(trace.has(key) for key in self.required):
            return MetricResult.skipped(Reason.MISSING_FIELDS)
        return self._decide(trace)

    def _decide(self, trace: Trace) -> MetricResult:
        actual = [self._key(call, "tool_calls") for call in trace.list("tool_calls")]
        expected = [
            self._key(call, "expected_tool_calls") for call in trace.list("expected_tool_calls")
        ]
        ok = _matches(self._mode, actual, expected)
        return MetricResult(
            status=Status.DECIDED,
            score=1.0 if ok else 0.0,
            passed=ok,
            reason=self._mode.value,
            evidence={"actual_count": len(actual), "expected_count": len(expected)},
        )

    def _key(self, entry: object, where: str) -> str:
        name, arguments = _call_parts(entry, where)
        if not self._match_arguments:
            return canonical_json(name)
        return canonical_json({"name": name, "arguments": arguments})

    def __repr__(self) -> str:
        return f"TrajectoryMatch(mode={self._mode.value}, match_arguments={self._match_arguments})"


def _call_parts(entry: object, where: str) -> tuple[str, Any]:
    """``(name, arguments)``; a string is ``{name: s, arguments: {}}``, missing arguments ``{}``."""
    if isinstance(entry, str):
        return entry, {}
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        invalid(f"every {where} entry must be a string or an object with a string name")
    arguments = entry.get("arguments")
    return entry["name"], {} if arguments is None else arguments


def _matches(mode: MatchMode, actual: list[str], expected: list[str]) -> bool:
    if mode is MatchMode.STRICT:
        return actual == expected
    counts_a, counts_e = Counter(actual), Counter(expected)
    if mode is MatchMode.UNORDERED:
        return counts_a == counts_e
    if mode is MatchMode.SUBSET:
        return all(count <= counts_e[key] for key, count in counts_a.items())
    return all(count <= counts_a[key] for key, count in counts_e.items())


def trajectory_match(mode: MatchMode | str, match_arguments: bool = False) -> TrajectoryMatch:
    """A ``trajectory_match`` metric. ``mode`` may be given by name (case-insensitive)."""
    if isinstance(mode, str) and not isinstance(mode, MatchMode):
        if mode.upper() not in MatchMode.__members__:
            invalid(f"mode must be one of {', '.join(MatchMode)}")
        mode = MatchMode[mode.upper()]
    if not isinstance(mode, MatchMode):
        invalid("mode must be a MatchMode")
    if not isinstance(match_arguments, bool):
        invalid("match_arguments must be a bool")
    return TrajectoryMatch(mode, match_arguments)
