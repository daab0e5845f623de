"""evalq producers: turn agent traces into snapshots and send them to the workers by task name.

- :class:`Snapshot` / :class:`OutcomeEvent`: the wire contract (``producer.snapshot``).
- :func:`read_snapshots`: read a trace file (OpenAI chat JSONL and the other importers' formats).
- :class:`Producer`: publish snapshots (live lane, or batched on the backfill lane) and outcome
  events to the broker; it never imports worker tasks.
- :class:`LiveSubmitter`: a non-blocking, bounded buffer for live apps in front of a producer.
"""

from ._producer import Producer
from ._reader import ImportErrorReport, InvalidTraceError, read_snapshots
from ._submitter import LiveSubmitter
from .snapshot import (
    EVALUATE_TASK,
    LANE_QUEUES,
    OUTCOME_TASK,
    Lane,
    OutcomeEvent,
    Snapshot,
    WindowViolation,
)

__all__ = [
    "EVALUATE_TASK",
    "LANE_QUEUES",
    "OUTCOME_TASK",
    "ImportErrorReport",
    "InvalidTraceError",
    "Lane",
    "LiveSubmitter",
    "OutcomeEvent",
    "Producer",
    "Snapshot",
    "WindowViolation",
    "read_snapshots",
]
