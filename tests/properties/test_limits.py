"""Oversized inputs are refused by a limit, never truncated into a judgment.

- The engine: evidence larger than ``max_state_chars`` makes the metrics that need it SKIPPED
  ``EVALUATION_LIMIT``; whatever the judge is asked carries the evidence whole or not at all.
- The worker: a queued item larger than ``MAX_ITEM_BYTES`` is refused ``PAYLOAD_TOO_LARGE``
  before anything is evaluated (the dead-letter path runs through a real worker in
  ``test_messages``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producer import Snapshot
from producer.snapshot import MAX_ITEM_BYTES
from tests.properties.strategies import examples
from tests.queue.queue_kit import example_snapshots
from worker.canonical_json import canonical_json
from worker.dead_letters import DeadLetterCode
from worker.evaluation import Evaluator, Limits, Reason, Status, Thresholds, Trace, agent_metrics
from worker.handling import RefusedError, decode_snapshot
from worker.judges import JudgeRequest, JudgeResponse, SyntheticJudge

LIMIT = 4_000
START, END = "<<EVIDENCE-START>>", "<<EVIDENCE-END>>"


@dataclass
class RecordingJudge:
    """The synthetic judge, keeping every request it was asked (the evaluator's seam)."""

    requests: list[JudgeRequest] = field(default_factory=list)

    async def __call__(self, request: JudgeRequest) -> JudgeResponse:
        self.requests.append(request)
        return await SyntheticJudge()(request)


def _trace(evidence: str) -> Trace:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    return Trace.from_messages(
        "limits",
        [
            {"role": "user", "content": "What does the record say?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": evidence},
            {"role": "assistant", "content": "The record says what it says."},
        ],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
    )


@settings(max_examples=examples(60), deadline=None)
@given(size=st.integers(0, 3 * LIMIT), filler=st.sampled_from(["x", "é", "💥", '"\\']))
def test_evidence_is_sent_whole_or_the_metric_is_skipped_by_limit(size: int, filler: str) -> None:
    """Tool output of any size: each request holds it entirely or not at all; skips say why."""
    evidence = START + filler * size + END
    judge = RecordingJudge()
    metrics = agent_metrics(Thresholds(0.2, 0.8))
    evaluator = Evaluator(judge, metrics, Limits(budget_s=10.0, max_state_chars=LIMIT))
    report = asyncio.run(evaluator.evaluate(_trace(evidence)))

    asked_whole = False
    for request in judge.requests:
        leaves = _strings(request.wire()["state"])
        if any(START in leaf or END in leaf for leaf in leaves):
            assert evidence in leaves, "the evidence was sent in part"
            asked_whole = True
    skipped = [e.id for e in report.results if e.result.reason == Reason.EVALUATION_LIMIT]
    for entry in report.results:
        if entry.result.reason == Reason.EVALUATION_LIMIT:
            assert entry.result.status is Status.SKIPPED
    assert asked_whole or skipped, "the evidence was neither judged whole nor refused by limit"
    if len(evidence) > LIMIT:
        assert not asked_whole, "evidence over the limit must never reach the judge"
        assert "used_tool_result" in skipped


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


@settings(max_examples=examples(5), deadline=None)
@given(extra=st.integers(1, 4096))
def test_an_item_over_the_byte_limit_is_refused_never_cut(extra: int) -> None:
    """A snapshot just over MAX_ITEM_BYTES: PAYLOAD_TOO_LARGE; just under: decoded whole."""
    base = {**example_snapshots()["order-42"].wire(), "source": ""}
    pad = MAX_ITEM_BYTES - len(canonical_json(base).encode("utf-8"))  # the worker's measure
    under = {**base, "source": "s" * pad}  # exactly at the limit
    assert decode_snapshot(under) == Snapshot.model_validate(under)
    over = {**base, "source": "s" * (pad + extra)}
    with pytest.raises(RefusedError) as refused:
        decode_snapshot(over)
    assert getattr(refused.value, "code", None) == DeadLetterCode.PAYLOAD_TOO_LARGE
