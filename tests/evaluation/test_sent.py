"""`Entry.sent`: what each metric's judge request carried (exact question texts, the sha256 of
the state text, the model the reply named), the engine's half of an auditable record."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from tests.evaluation.engine_kit import Probe, ScriptedJudge, answer_all, make_trace, noul
from worker.evaluation import Evaluator, Limits, MetricResult, Progress, Reason
from worker.judges import InvalidReply, JudgeError, JudgeRequest, JudgeResponse


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.asyncio
async def test_sent_holds_the_request_texts_digest_and_model() -> None:
    """Packed metrics share the request's state digest; each keeps its own questions' texts."""
    judge = ScriptedJudge(reply=lambda request, _n: answer_all(request, model="jev-2026-01-15"))
    one = Probe("one", state_value={"a": "été 1"}, questions_value={"x": noul("X?"), "y": noul()})
    two = Probe("two", state_value={"a": "été 1", "b": [1, 2.5]})
    skipped = Probe("skipped", early=MetricResult.skipped(Reason.MISSING_FIELDS))
    report = await Evaluator(judge, [one, two, skipped], Limits()).evaluate(make_trace())
    (request,) = judge.requests
    state_sha256 = _sha256(request.state_json())
    by_id = {e.id: e for e in report.results}
    first, second = by_id["one"].sent, by_id["two"].sent
    assert first is not None
    assert second is not None
    assert first.questions == tuple(request.questions[f"one.{q}"].wire_json() for q in "xy")
    assert second.questions == (request.questions["two.q"].wire_json(),)
    assert first.state_sha256 == second.state_sha256 == state_sha256
    assert first.model == second.model == "jev-2026-01-15"
    assert by_id["skipped"].sent is None


@pytest.mark.asyncio
async def test_each_request_has_its_own_digest() -> None:
    """Metrics whose states conflict go in two requests: two digests, one per request."""
    judge = ScriptedJudge()
    one = Probe("one", state_value={"a": 1})
    two = Probe("two", state_value={"a": 2})
    report = await Evaluator(judge, [one, two], Limits()).evaluate(make_trace())
    digests = [e.sent.state_sha256 for e in report.results if e.sent is not None]
    assert digests == [_sha256(r.state_json()) for r in judge.requests]
    assert len(set(digests)) == 2


@pytest.mark.parametrize(
    ("reply", "model"),
    [
        (JudgeError("BACKEND_ERROR"), None),  # no reply: no model
        (InvalidReply("jev-9", None), "jev-9"),  # unusable, but it named who answered
    ],
    ids=["backend-error", "invalid-reply"],
)
@pytest.mark.asyncio
async def test_a_failed_request_still_says_what_was_sent(reply: Exception, model: Any) -> None:
    """The texts and digest are recorded before the request leaves; the model only if named."""
    judge = ScriptedJudge(reply=lambda _request, _n: reply)
    report = await Evaluator(judge, [Probe("one")], Limits()).evaluate(make_trace())
    (entry,) = report.results
    assert entry.sent is not None
    assert entry.sent.state_sha256 == _sha256(judge.requests[0].state_json())
    assert entry.sent.model == model


@pytest.mark.asyncio
async def test_a_blank_model_name_counts_as_none() -> None:
    """A reply naming the model as blank says nothing about who answered."""

    def blank(request: JudgeRequest, _n: int) -> JudgeResponse:
        return answer_all(request, model="")

    report = await Evaluator(ScriptedJudge(reply=blank), [Probe("one")]).evaluate(make_trace())
    (entry,) = report.results
    assert entry.sent is not None
    assert entry.sent.model is None


@pytest.mark.asyncio
async def test_an_interrupted_evaluation_keeps_what_it_sent() -> None:
    """Cut off while the judge holds the request: the report still says what was sent."""
    started = asyncio.Event()

    class Stuck:
        async def __call__(self, request: JudgeRequest) -> JudgeResponse:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("never answered")

    evaluator = Evaluator(Stuck(), [Probe("one")], Limits(budget_s=5.0))
    trace, progress = make_trace(), Progress()
    task = asyncio.ensure_future(evaluator.evaluate(trace, progress))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (entry,) = evaluator.interrupted_report(trace, progress, 0.1).results
    assert entry.result.reason == Reason.TIMEOUT
    assert entry.sent is not None
    assert entry.sent.model is None
    assert entry.sent.questions == (noul().wire_json(),)
