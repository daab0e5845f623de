"""evalq producers: turn agent traces into snapshots and send them to the workers by task name.

- :class:`Snapshot` / :class:`OutcomeEvent` / :class:`SamplingTally` / :class:`Reevaluation`
  (a retry attempt of a stored snapshot): the wire contract
  (``producer.snapshot``).
- :func:`read_snapshots`: read a trace file (OpenAI chat JSONL and the other importers' formats).
- :class:`Producer`: publish snapshots (live lane, or batched on the backfill lane), outcome
  events and sampling tallies to the broker; it never imports worker tasks. Live apps call
  ``Producer.submit`` (sampled, buffered, never blocking or raising). On RabbitMQ every send is
  confirmed and mandatory (``producer._confirms``). A broker call that fails raises
  :class:`BrokerError` (``.code``: a :class:`BrokerFailure`), never the broker library's own
  exception (``producer._broker``).
- :class:`Sampler` / :class:`SamplingRule`: deterministic per-slice sampling with counts of what
  was left out.
- :func:`observe`: capture one OpenAI/Anthropic SDK agent invocation and submit its snapshot.
- :class:`Redactor` / :class:`RegexRedactor`: the redaction hook applied before snapshotting.
- :func:`run_backfill` (:class:`BackfillProgress`, :class:`BackfillSummary`) and
  :func:`send_outcomes`: resumable backfills and outcome files (``evalq backfill`` / ``outcome``),
  with what ``evalq`` builds them from: :func:`expand_paths`, :func:`backfill_id_for`,
  :class:`RedisQueueDepth`, :func:`rich_progress`, :func:`store_counts` (evaluated/failed read
  back), :func:`outcome_problem`, :class:`BackfillError` and the checkpoint prefixes.
- :class:`LiveSubmitter`: the non-blocking, bounded buffer behind ``Producer.submit``.

Exception tree (``submit`` raises none of them: it counts drops instead)::

    ValueError                  permanent: the input is wrong, sending it again cannot help
     ├── WindowViolation        a snapshot holds evidence after its own cutoff (WINDOW_VIOLATION)
     ├── InvalidTraceError      the first invalid line, when no report collects them (.rejected)
     ├── OversizedSnapshotError a snapshot over the worker's MAX_ITEM_BYTES
     ├── RedactionError         the redaction hook failed or changed an event (REDACTION_INVALID)
     ├── BackfillInputError     a backfill input that is not a regular file, or changed
     ├── FieldError             (importers) a field breaks its format: becomes a rejected line
     └── NotReadyError          no snapshot can be made yet (.code): a rejected line, or observe's
                                 reason to send nothing
    RuntimeError                transient: the broker; sending again may succeed
     ├── BrokerError            a broker call failed (.code: a BrokerFailure, e.g.
     │   │                       BROKER_UNREACHABLE, PUBLISH_REFUSED); __cause__ is the library's
     │   └── UnroutableError    RabbitMQ returned a message twice (its lane queue stays missing)
     └── BackfillError          a backfill stopped (.code, e.g. SEND_FAILED): resume from .progress

kombu's, py-amqp's and redis-py's exceptions (and ``OSError`` from a broker socket) are translated
into :class:`BrokerError` at one place, ``producer._broker.Broker.translating``, around the
producer's broker calls only: an ``OSError`` from reading a caller's input passes through as is.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .snapshot import (
    EVALUATE_TASK,
    LANE_QUEUES,
    OUTCOME_TASK,
    REEVALUATE_TASK,
    TALLY_TASK,
    Lane,
    OutcomeEvent,
    Reevaluation,
    SamplingTally,
    Snapshot,
    WindowViolation,
)

if TYPE_CHECKING:
    from ._backfill import (
        COMPLETE_PREFIX,
        FINGERPRINT_PREFIX,
        BackfillError,
        BackfillProgress,
        BackfillSummary,
        RedisQueueDepth,
        backfill_id_for,
        expand_paths,
        outcome_problem,
        rich_progress,
        run_backfill,
        send_outcomes,
        store_counts,
    )
    from ._broker import BrokerError, BrokerFailure, UnroutableError
    from ._observer import observe
    from ._producer import Producer
    from ._reader import ImportErrorReport, InvalidTraceError, RejectedLine, read_snapshots
    from ._redaction import Redactor, RegexRedactor
    from ._sampling import Sampler, SamplingRule
    from ._submitter import LiveSubmitter

__all__ = [
    "COMPLETE_PREFIX",
    "EVALUATE_TASK",
    "FINGERPRINT_PREFIX",
    "LANE_QUEUES",
    "OUTCOME_TASK",
    "REEVALUATE_TASK",
    "TALLY_TASK",
    "BackfillError",
    "BackfillProgress",
    "BackfillSummary",
    "BrokerError",
    "BrokerFailure",
    "ImportErrorReport",
    "InvalidTraceError",
    "Lane",
    "LiveSubmitter",
    "OutcomeEvent",
    "Producer",
    "Redactor",
    "RedisQueueDepth",
    "Reevaluation",
    "RegexRedactor",
    "RejectedLine",
    "Sampler",
    "SamplingRule",
    "SamplingTally",
    "Snapshot",
    "UnroutableError",
    "WindowViolation",
    "backfill_id_for",
    "expand_paths",
    "observe",
    "outcome_problem",
    "read_snapshots",
    "rich_progress",
    "run_backfill",
    "send_outcomes",
    "store_counts",
]

# Everything beyond the contract loads on first use: importing the contract
# (``producer.snapshot``, which runs this file first) must not load Celery, kombu or the SDKs.
_LAZY = {
    "COMPLETE_PREFIX": "._backfill",
    "FINGERPRINT_PREFIX": "._backfill",
    "BackfillError": "._backfill",
    "BackfillProgress": "._backfill",
    "BackfillSummary": "._backfill",
    "RedisQueueDepth": "._backfill",
    "backfill_id_for": "._backfill",
    "expand_paths": "._backfill",
    "outcome_problem": "._backfill",
    "rich_progress": "._backfill",
    "run_backfill": "._backfill",
    "send_outcomes": "._backfill",
    "store_counts": "._backfill",
    "BrokerError": "._broker",
    "BrokerFailure": "._broker",
    "UnroutableError": "._broker",
    "observe": "._observer",
    "Producer": "._producer",
    "ImportErrorReport": "._reader",
    "InvalidTraceError": "._reader",
    "RejectedLine": "._reader",
    "read_snapshots": "._reader",
    "Redactor": "._redaction",
    "RegexRedactor": "._redaction",
    "Sampler": "._sampling",
    "SamplingRule": "._sampling",
    "LiveSubmitter": "._submitter",
}


def __getattr__(name: str) -> Any:
    """A lazily exported name (:data:`_LAZY`), imported and kept on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
