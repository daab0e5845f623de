"""First-fit packing of metrics into judge requests (docs/semantics.md §6.1 step 7)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.evaluation.engine_kit import Probe, ScriptedJudge, make_trace, noul
from worker.evaluation import Evaluator, Limits, Status, canonical_json, json_size, thaw
from worker.judges import JudgeRequest


async def _requests(*metrics: Probe, **limits: Any) -> list[JudgeRequest]:
    judge = ScriptedJudge()
    report = await Evaluator(judge, metrics, Limits(**limits)).evaluate(make_trace())
    assert report.requests == len(judge.requests)
    assert all(e.result.status is Status.DECIDED for e in report.results)
    return judge.requests


def _layout(requests: list[JudgeRequest]) -> list[tuple[list[str], dict[str, Any]]]:
    return [(list(r.questions), thaw(r.state)) for r in requests]


@pytest.mark.asyncio
async def test_equal_shared_state_packs_into_one_request() -> None:
    """Metrics whose shared keys hold equal values share one request and one state copy."""
    state = {"request": "Where is order 42?", "tool_calls": [{"name": "lookup", "id": "c1"}]}
    requests = await _requests(Probe("a", state_value=state), Probe("b", state_value=dict(state)))
    assert _layout(requests) == [(["a.q", "b.q"], state)]


@pytest.mark.asyncio
async def test_disjoint_keys_merge_into_one_state() -> None:
    """Metrics with different keys are packed together with the union of their states."""
    requests = await _requests(
        Probe("a", state_value={"request": "r"}),
        Probe("b", state_value={"final_answer": "f"}),
        Probe("c", state_value={}),
    )
    assert _layout(requests) == [(["a.q", "b.q", "c.q"], {"request": "r", "final_answer": "f"})]


@pytest.mark.asyncio
async def test_conflict_example_first_second_third() -> None:
    """The semantics §6.1 example: evidence A/B/A gives {first.q, third.q} on A, {second.q} on B."""
    requests = await _requests(
        Probe("first", state_value={"evidence": "A"}),
        Probe("second", state_value={"evidence": "B"}),
        Probe("third", state_value={"evidence": "A"}),
    )
    assert _layout(requests) == [
        (["first.q", "third.q"], {"evidence": "A"}),
        (["second.q"], {"evidence": "B"}),
    ]


@pytest.mark.asyncio
async def test_true_one_and_one_point_zero_never_merge() -> None:
    """Equality is canonical JSON: True, 1 and 1.0 are three different states."""
    requests = await _requests(
        Probe("t", state_value={"v": True}),
        Probe("i", state_value={"v": 1}),
        Probe("f", state_value={"v": 1.0}),
        Probe("i2", state_value={"v": 1}),
    )
    assert [list(r.questions) for r in requests] == [["t.q"], ["i.q", "i2.q"], ["f.q"]]


@pytest.mark.asyncio
async def test_nested_equality_ignores_key_order() -> None:
    """Deep-equal objects pack together even when their keys are in a different order."""
    requests = await _requests(
        Probe("a", state_value={"call": {"name": "x", "args": {"p": 1, "q": [1, 2]}}}),
        Probe("b", state_value={"call": {"args": {"q": [1, 2], "p": 1}, "name": "x"}}),
        Probe("c", state_value={"call": {"args": {"q": [2, 1], "p": 1}, "name": "x"}}),
    )
    assert [list(r.questions) for r in requests] == [["a.q", "b.q"], ["c.q"]]


@pytest.mark.asyncio
async def test_values_are_never_overwritten() -> None:
    """A later metric never replaces a value already in a group's state."""
    requests = await _requests(
        Probe("a", state_value={"k": "first", "x": 1}),
        Probe("b", state_value={"k": "second"}),
        Probe("c", state_value={"x": 1, "y": 2}),
    )
    assert _layout(requests) == [
        (["a.q", "c.q"], {"k": "first", "x": 1, "y": 2}),
        (["b.q"], {"k": "second"}),
    ]


@pytest.mark.asyncio
async def test_equal_value_keeps_the_first_metrics_copy() -> None:
    """An equal value from a later metric does not replace the first copy (key order kept)."""
    requests = await _requests(
        Probe("a", state_value={"call": {"name": "x", "args": {"p": 1}}}),
        Probe("b", state_value={"call": {"args": {"p": 1}, "name": "x"}}),
    )
    (request,) = requests
    assert list(request.state["call"]) == ["name", "args"]
    assert list(request.wire()["state"]["call"]) == ["name", "args"]


@pytest.mark.asyncio
async def test_first_fit_picks_earliest_group() -> None:
    """A metric joins the first group (in creation order) that can take it."""
    requests = await _requests(
        Probe("g1", state_value={"k": 1}),
        Probe("g2", state_value={"k": 2}),
        Probe("g3", state_value={"k": 3}),
        Probe("any", state_value={"other": 0}),
        Probe("three", state_value={"k": 3}),
    )
    assert [list(r.questions) for r in requests] == [
        ["g1.q", "any.q"],
        ["g2.q"],
        ["g3.q", "three.q"],
    ]


@pytest.mark.asyncio
async def test_question_count_limit_opens_new_group() -> None:
    """A group never holds more than max_questions; first fit fills earlier groups later."""
    two = {"q": noul(), "r": noul()}
    requests = await _requests(
        Probe("a", questions_value=two),
        Probe("b", questions_value=two),
        Probe("c"),
        max_questions=3,
    )
    assert [list(r.questions) for r in requests] == [["a.q", "a.r", "c.q"], ["b.q", "b.r"]]


@pytest.mark.asyncio
async def test_merged_state_size_limit() -> None:
    """A metric joins a group only if the merged state stays within max_state_chars."""
    a_state, b_state = {"a": "x" * 10}, {"b": "y" * 10}
    merged = json_size({**a_state, **b_state})
    exact = await _requests(
        Probe("a", state_value=a_state), Probe("b", state_value=b_state), max_state_chars=merged
    )
    assert [list(r.questions) for r in exact] == [["a.q", "b.q"]]
    split = await _requests(
        Probe("a", state_value=a_state),
        Probe("b", state_value=b_state),
        max_state_chars=merged - 1,
    )
    assert _layout(split) == [(["a.q"], a_state), (["b.q"], b_state)]


@pytest.mark.asyncio
async def test_same_local_ids_do_not_collide() -> None:
    """Two metrics may both use local id `q`: the wire ids are namespaced by metric."""
    first, second = Probe("first"), Probe("second")
    requests = await _requests(first, second)
    assert list(requests[0].questions) == ["first.q", "second.q"]
    assert list(first.seen_answers[0]) == ["q"]
    assert list(second.seen_answers[0]) == ["q"]


@pytest.mark.asyncio
async def test_groups_run_in_creation_order() -> None:
    """Requests are sent in group-creation order, one after another."""
    requests = await _requests(
        Probe("b", state_value={"k": "B"}),
        Probe("a", state_value={"k": "A"}),
        Probe("c", state_value={"k": "C"}),
    )
    assert [thaw(r.state) for r in requests] == [{"k": "B"}, {"k": "A"}, {"k": "C"}]


def _reference_layout(
    states: list[dict[str, Any]], max_state_chars: int
) -> list[tuple[list[str], dict[str, Any]]]:
    """First fit per semantics §6.1: equal shared values (canonical JSON), size by json_size."""
    groups: list[tuple[list[str], dict[str, Any]]] = []
    for index, state in enumerate(states):
        if json_size(state) > max_state_chars:
            continue  # SKIPPED EVALUATION_LIMIT: never asked
        for ids, merged in groups:
            shared_equal = all(
                canonical_json(merged[k]) == canonical_json(v)
                for k, v in state.items()
                if k in merged
            )
            if shared_equal and json_size({**merged, **state}) <= max_state_chars:
                ids.append(f"m{index}.q")
                for k, v in state.items():
                    merged.setdefault(k, v)
                break
        else:
            groups.append(([f"m{index}.q"], dict(state)))
    return groups


_STATE_VALUES = st.one_of(
    st.sampled_from(["A", "B", "é😀", 1, 1.0, True, None]),
    st.lists(st.sampled_from(["x", "yy", 2]), max_size=3),
    st.dictionaries(st.sampled_from(["p", "q"]), st.sampled_from([1, "1", "ü"]), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(["k1", "k2", "k3", "ключ"]), _STATE_VALUES, max_size=3),
        min_size=1,
        max_size=5,
    ),
    st.integers(min_value=2, max_value=60),
)
def test_packing_matches_first_fit_by_serialized_size(
    states: list[dict[str, Any]], max_state_chars: int
) -> None:
    """Sizes summed from each value's text give the same groups as serializing merged states."""
    probes = [Probe(f"m{i}", state_value=state) for i, state in enumerate(states)]
    judge = ScriptedJudge()
    evaluator = Evaluator(judge, probes, Limits(max_state_chars=max_state_chars))
    asyncio.run(evaluator.evaluate(make_trace()))
    assert _layout(judge.requests) == _reference_layout(states, max_state_chars)
    for request in judge.requests:
        assert json_size(request.state) <= max_state_chars
        assert json.loads(request.state_json()) == thaw(request.state)
