"""``tool_execution``: did each tool call of the window execute? Deterministic, no judge request.

Recorded apart from whether a call was the right one (``tool_choice``, ``call_appropriate``):
a well-chosen call can fail, and a needless one can succeed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._agent import JudgeFree, invalid
from ._result import MetricResult, Reason, Status, scored

if TYPE_CHECKING:
    from ._trace import Trace

__all__ = ["ToolExecution", "call_label"]

_LABELS = ("ok", "error", "no_result")


def call_label(call: Mapping[str, Any]) -> str:
    """``no_result`` without a result, ``error`` when its state is ``ERROR``, else ``ok``.

    A result whose state is ``UNKNOWN`` (the format does not say) or ``SUCCESS`` is ``ok``: the
    tool returned something and nothing marked it as failed.
    """
    if "result" not in call:
        return "no_result"
    return "error" if call.get("result_state") == "ERROR" else "ok"


class ToolExecution(JudgeFree):
    """Per call ``ok``, ``error`` or ``no_result``, as one result per evaluated unit.

    The result model: one DECIDED result for the window, with the per-call labels in its
    evidence (``calls``: ``[{id, name, label}]`` in call order, and the count of each label),
    so one record per invocation says how its calls executed. Its ``label`` is the worst
    per-call label (``error``, then ``no_result``, then ``ok``), ``score`` the share of ``ok``
    calls, ``passed`` true iff every call is ``ok``; ``reason`` is ``ALL_OK``,
    ``CALL_ERROR`` or ``NO_RESULT`` after that label. SKIPPED ``MISSING_FIELDS`` without
    ``tool_calls``, ``NO_TOOL_CALLS`` when the window made none.

    A call with no result makes a snapshot's trace incomplete (``PENDING_TOOL_CALL``), and the
    evaluator skips every metric of an incomplete trace (``INCOMPLETE_TRACE``), this one
    included; ``no_result`` is therefore seen on traces given as fields (datasets, own formats),
    which carry no such issue.
    """

    id = "tool_execution"
    version = "evalq-tool-execution-r1"

    def precheck(self, trace: Trace) -> MetricResult:
        """The final result (see the class docstring)."""
        if not trace.has("tool_calls"):
            return MetricResult.skipped(Reason.MISSING_FIELDS)
        calls = trace.list("tool_calls")
        if not calls:
            return MetricResult.skipped(Reason.NO_TOOL_CALLS)
        per_call = [_entry(call) for call in calls]
        counts = {label: sum(1 for e in per_call if e["label"] == label) for label in _LABELS}
        worst, reason = _worst(counts)
        evidence: dict[str, Any] = {"calls": per_call, **counts}
        ok = counts["ok"] == len(per_call)
        return scored(Status.DECIDED, counts["ok"] / len(per_call), ok, worst, reason, evidence)

    def __repr__(self) -> str:
        return f"ToolExecution(version={self.version!r})"


def _entry(call: object) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        invalid("every tool_calls entry must be an object")
    return {"id": call.get("id"), "name": call.get("name"), "label": call_label(call)}


def _worst(counts: Mapping[str, int]) -> tuple[str, str]:
    if counts["error"]:
        return "error", Reason.CALL_ERROR
    if counts["no_result"]:
        return "no_result", Reason.NO_RESULT
    return "ok", Reason.ALL_OK
