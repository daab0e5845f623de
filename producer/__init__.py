"""evalq producers: turn agent traces into snapshots and send them to the workers by task name.

- :class:`Snapshot` / :class:`OutcomeEvent` / :class:`SamplingTally`: the wire contract
  (``producer.snapshot``).
- :func:`read_snapshots`: read a trace file (OpenAI chat JSONL and the other importers' formats).
- :class:`Producer`: publish snapshots (live lane, or batched on the backfill lane), outcome
  events and sampling tallies to the broker; it never imports worker tasks. Live apps call
  ``Producer.submit`` (sampled, buffered, never blocking or raising).
- :class:`Sampler` / :class:`SamplingRule`: deterministic per-slice sampling with counts of what
  was left out.
- :func:`observe`: capture one OpenAI/Anthropic SDK agent invocation and submit its snapshot.
- :class:`Redactor` / :class:`RegexRedactor`: the redaction hook applied before snapshotting.
- :func:`run_backfill` (:class:`BackfillProgress`, :class:`BackfillSummary`) and
  :func:`send_outcomes`: resumable backfills and outcome files (``evalq backfill`` / ``outcome``).
- :class:`LiveSubmitter`: the non-blocking, bounded buffer behind ``Producer.submit``.
"""

from ._backfill import BackfillProgress, BackfillSummary, run_backfill, send_outcomes
from ._observer import observe
from ._producer import Producer
from ._reader import ImportErrorReport, InvalidTraceError, read_snapshots
from ._redaction import Redactor, RegexRedactor
from ._sampling import Sampler, SamplingRule
from ._submitter import LiveSubmitter
from .snapshot import (
    EVALUATE_TASK,
    LANE_QUEUES,
    OUTCOME_TASK,
    TALLY_TASK,
    Lane,
    OutcomeEvent,
    SamplingTally,
    Snapshot,
    WindowViolation,
)

__all__ = [
    "EVALUATE_TASK",
    "LANE_QUEUES",
    "OUTCOME_TASK",
    "TALLY_TASK",
    "BackfillProgress",
    "BackfillSummary",
    "ImportErrorReport",
    "InvalidTraceError",
    "Lane",
    "LiveSubmitter",
    "OutcomeEvent",
    "Producer",
    "Redactor",
    "RegexRedactor",
    "Sampler",
    "SamplingRule",
    "SamplingTally",
    "Snapshot",
    "WindowViolation",
    "observe",
    "read_snapshots",
    "run_backfill",
    "send_outcomes",
]
