"""The JEV trace-evaluation engine (docs/semantics.md, the AgentScope contract).

A pure library: no Celery, no store, no broker, no settings. Build a :class:`Trace`, choose
metrics, and ``await Evaluator(judge, metrics, limits).evaluate(trace)`` for a :class:`Report`.

Errors: invalid arguments anywhere raise ``ValueError`` (pydantic's ``ValidationError`` is one),
except a judge that is not an async callable: ``TypeError`` when the :class:`Evaluator` is built.
Nothing raised inside a metric or a judge escapes ``evaluate``: it becomes a result with a reason
code (DEFINITION_ERROR, REDUCE_ERROR, BACKEND_ERROR, INVALID_RESPONSE, TIMEOUT). Only the caller's
own cancellation propagates (and then no report is produced): a caller that passed a
:class:`Progress` gets what had finished from ``Evaluator.interrupted_report``.
"""

from worker.canonical_json import canonical_json, freeze, json_size, thaw

from ._agent import JudgeFree
from ._evaluator import Evaluator, Progress
from ._limits import Limits
from ._metric import ID_PATTERN, Metric, check_id
from ._metrics import agent_metrics
from ._proposed_call import CallAppropriate, CallValid, tool_call_metrics
from ._report import Entry, Report, RequestUsage, Sent
from ._result import MetricResult, Reason, Status, Thresholds
from ._runner import (
    Case,
    DatasetLatency,
    DatasetReport,
    DatasetRow,
    DatasetUsage,
    Expected,
    Summary,
    SummaryCounter,
    run_dataset,
)
from ._sentences import split_sentences
from ._tool_execution import ToolExecution
from ._trace import Trace
from ._trajectory import MatchMode, trajectory_match

__all__ = [
    "ID_PATTERN",
    "CallAppropriate",
    "CallValid",
    "Case",
    "DatasetLatency",
    "DatasetReport",
    "DatasetRow",
    "DatasetUsage",
    "Entry",
    "Evaluator",
    "Expected",
    "JudgeFree",
    "Limits",
    "MatchMode",
    "Metric",
    "MetricResult",
    "Progress",
    "Reason",
    "Report",
    "RequestUsage",
    "Sent",
    "Status",
    "Summary",
    "SummaryCounter",
    "Thresholds",
    "ToolExecution",
    "Trace",
    "agent_metrics",
    "canonical_json",
    "check_id",
    "freeze",
    "json_size",
    "run_dataset",
    "split_sentences",
    "thaw",
    "tool_call_metrics",
    "trajectory_match",
]
