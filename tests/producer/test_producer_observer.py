"""Live observer with the real OpenAI and Anthropic SDK clients against a local fake server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from producer import Producer
from producer._observer import CAPTURE_LIMIT_CHARS, observe, observer_stats
from producer._redaction import RegexRedactor
from producer._sampling import Sampler, SamplingRule, unit_value
from producer._submitter import LiveSubmitter
from producer.snapshot import LANE_QUEUES, EventType, Lane, Snapshot, Unit, WindowRule
from tests.producer.fake_llm_server import (
    FakeLLM,
    anthropic_text,
    anthropic_tool_use,
    openai_text,
    openai_tool_call,
    running,
)
from tests.producer.producer_kit import queued_payloads
from worker.evaluation import Limits

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


class ListSink:
    """Collects submitted snapshots (the observer's only contract with its sink)."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def submit(self, snapshot: Snapshot) -> bool:
        self.snapshots.append(snapshot)
        return True


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    """A scripted fake LLM server on loopback."""
    with running() as fake:
        yield fake


def _openai_client(llm: FakeLLM) -> Any:
    return openai.OpenAI(base_url=f"{llm.url}/v1", api_key="test-key", max_retries=0)


def _openai_agent(client: Any, obs: Any, question: str) -> str:
    """A typical tool loop: call, run requested tools, call again with a wider catalog."""
    messages: list[Any] = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": question},
    ]
    catalog = [WEATHER]
    while True:
        reply = obs.call(
            client.chat.completions.create, model="gpt-test", messages=messages, tools=catalog
        )
        message = reply.choices[0].message
        messages.append(message)  # the SDK object itself, as real agents do
        if not message.tool_calls:
            return str(message.content)
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 14}'})
        catalog = [WEATHER, CLOCK]


def test_openai_loop_submits_one_snapshot_with_per_round_catalogs(llm: FakeLLM) -> None:
    """One invocation → one snapshot: its events, each round's catalog at its output event."""
    llm.replies["/v1/chat/completions"].extend(
        [openai_tool_call("call_1", "get_weather", {"city": "Paris"}), openai_text("14 C.")]
    )
    sink = ListSink()
    with observe(sink, trace_id="run-1", sdk="openai", mode="shadow", agent_version="v7") as obs:
        answer = _openai_agent(_openai_client(llm), obs, "Weather in Paris?")
    assert answer == "14 C."
    assert obs.outcome == "submitted"
    (snapshot,) = sink.snapshots
    types = [e.type for e in snapshot.events]
    assert types == [
        EventType.SYSTEM,
        EventType.USER,
        EventType.ASSISTANT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.ASSISTANT,
    ]
    call = snapshot.events[3]
    assert (call.tool_name, call.call_id, dict(call.arguments)) == (
        "get_weather",
        "call_1",
        {"city": "Paris"},
    )
    assert snapshot.events[-1].text == "14 C."
    assert snapshot.unit.kind is Unit.INVOCATION
    assert snapshot.window.rule is WindowRule.INVOCATION_END
    assert snapshot.window.cutoff_event_id == snapshot.events[-1].id
    rounds = snapshot.tool_rounds
    assert rounds is not None
    assert [r.event_id for r in rounds] == [snapshot.events[2].id, snapshot.events[5].id]
    assert [[t.name for t in r.tools] for r in rounds] == [
        ["get_weather"],
        ["get_weather", "get_time"],
    ]
    assert snapshot.slice.agent_version == "v7"
    assert len(llm.requests) == 2  # the SDK calls really went over HTTP


def test_only_the_observed_invocation_is_snapshotted_from_a_longer_history(llm: FakeLLM) -> None:
    """Earlier turns in the history are context; the snapshot judges this invocation only."""
    llm.replies["/v1/chat/completions"].append(openai_text("Rome is 21 C."))
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "14 C."},
        {"role": "user", "content": "And Rome?"},
    ]
    sink = ListSink()
    client = _openai_client(llm)
    with observe(sink, trace_id="run-2", sdk="openai", mode="shadow") as obs:
        obs.call(client.chat.completions.create, model="gpt-test", messages=history)
    (snapshot,) = sink.snapshots
    judged = next(e for e in snapshot.events if e.id == snapshot.unit.event_id)
    assert judged.text == "And Rome?"
    assert snapshot.events[-1].text == "Rome is 21 C."
    assert snapshot.tool_rounds is not None
    assert snapshot.tool_rounds[0].tools == ()  # no tools offered: recorded as an empty catalog


def test_anthropic_loop_submits_one_snapshot(llm: FakeLLM) -> None:
    """Anthropic SDK: system, tool_use/tool_result blocks and rounds become one snapshot."""
    llm.replies["/v1/messages"].extend(
        [anthropic_tool_use("toolu_1", "get_weather", {"city": "Oslo"}), anthropic_text("2 C.")]
    )
    client = anthropic.Anthropic(base_url=llm.url, api_key="test-key", max_retries=0)
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    sink = ListSink()
    with observe(
        sink, trace_id="run-3", sdk="anthropic", mode="shadow", environment="canary"
    ) as obs:
        while True:
            reply = obs.call(
                client.messages.create,
                model="claude-test",
                max_tokens=256,
                system="You are terse.",
                messages=messages,
                tools=tools,
            )
            messages.append({"role": "assistant", "content": reply.content})  # SDK blocks
            if reply.stop_reason != "tool_use":
                break
            use = next(b for b in reply.content if b.type == "tool_use")
            result = {"type": "tool_result", "tool_use_id": use.id, "content": "2 C"}
            messages.append({"role": "user", "content": [result]})
    (snapshot,) = sink.snapshots
    assert [e.type for e in snapshot.events] == [
        EventType.SYSTEM,
        EventType.USER,
        EventType.ASSISTANT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.ASSISTANT,
    ]
    assert snapshot.events[2].text == "Let me check."
    assert snapshot.events[4].call_id == "toolu_1"
    assert snapshot.events[-1].text == "2 C."
    assert snapshot.tool_rounds is not None
    assert [r.event_id for r in snapshot.tool_rounds] == [
        snapshot.events[2].id,
        snapshot.events[5].id,
    ]
    assert snapshot.slice.environment == "canary"


def test_an_exception_in_the_agent_submits_nothing_and_propagates(llm: FakeLLM) -> None:
    """The agent's own error passes through unchanged and no snapshot is made."""
    llm.replies["/v1/chat/completions"].append(openai_tool_call("c1", "get_weather", {}))
    sink = ListSink()
    client = _openai_client(llm)
    before = observer_stats().get("agent_failed", 0)
    obs = observe(sink, trace_id="run-4", sdk="openai", mode="shadow")

    def agent() -> None:
        with obs:
            obs.call(client.chat.completions.create, model="gpt-test", messages=[_user("hi")])
            raise KeyError("tool crashed")

    with pytest.raises(KeyError, match="tool crashed"):
        agent()
    assert sink.snapshots == []
    assert obs.outcome == "agent_failed"
    assert observer_stats()["agent_failed"] == before + 1


def test_cancellation_of_an_async_agent_submits_nothing(llm: FakeLLM) -> None:
    """A cancelled asyncio agent (AsyncOpenAI client) leaves nothing submitted."""
    llm.replies["/v1/chat/completions"].append(openai_tool_call("c1", "get_weather", {}))
    sink = ListSink()

    async def agent(started: asyncio.Event) -> None:
        client = openai.AsyncOpenAI(base_url=f"{llm.url}/v1", api_key="k", max_retries=0)
        with observe(sink, trace_id="run-5", sdk="openai", mode="shadow") as obs:
            await obs.acall(client.chat.completions.create, model="m", messages=[_user("hi")])
            started.set()
            await asyncio.Event().wait()  # the tool "runs" until cancelled
        await client.close()

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(agent(started))
        await asyncio.wait_for(started.wait(), timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sink.snapshots == []
    assert len(llm.requests) == 1


def test_observer_failures_never_change_the_agents_output(llm: FakeLLM) -> None:
    """A sink that raises and a response that is not a message: the agent's answer is intact."""

    class BrokenSink:
        def submit(self, snapshot: Snapshot) -> bool:
            raise RuntimeError("broker exploded")

    llm.replies["/v1/chat/completions"].extend([openai_text("fine"), openai_text("fine too")])
    client = _openai_client(llm)
    before = observer_stats().get("OBSERVER_ERROR", 0)
    with observe(BrokenSink(), trace_id="run-6", sdk="openai", mode="shadow") as obs:
        reply = obs.call(client.chat.completions.create, model="m", messages=[_user("hi")])
    assert reply.choices[0].message.content == "fine"
    assert obs.outcome == "OBSERVER_ERROR"
    assert observer_stats()["OBSERVER_ERROR"] == before + 1

    sink = ListSink()
    with observe(sink, trace_id="run-7", sdk="openai", mode="shadow") as odd:
        odd.record_request([_user("hi")])
        odd.record_response(object())  # not JSON: observer breaks, agent does not notice
        result = client.chat.completions.create(model="m", messages=[_user("hi")])
    assert result.choices[0].message.content == "fine too"
    assert odd.outcome == "UNSERIALIZABLE_PAYLOAD"
    assert sink.snapshots == []


def test_enforce_mode_is_rejected_and_off_mode_captures_nothing(llm: FakeLLM) -> None:
    """mode='enforce' fails at construction; mode='off' makes no snapshot."""
    with pytest.raises(ValueError, match="cannot undo"):
        observe(ListSink(), trace_id="t", sdk="openai", mode="enforce")
    with pytest.raises(ValueError, match="sdk"):
        observe(ListSink(), trace_id="t", sdk="gemini")  # type: ignore[arg-type]
    llm.replies["/v1/chat/completions"].append(openai_text("ok"))
    sink = ListSink()
    with observe(sink, trace_id="t", sdk="openai", mode="off") as obs:
        obs.call(_openai_client(llm).chat.completions.create, model="m", messages=[_user("hi")])
    assert sink.snapshots == []
    assert obs.outcome == "off"


def test_sampling_and_redaction_apply_before_submission(llm: FakeLLM) -> None:
    """A sampled-out trace is not submitted; a kept one is stamped and redacted by the hook."""
    ids = [f"run-s{i}" for i in range(50)]
    kept_id = next(t for t in ids if unit_value(t) < 0.5)
    dropped_id = next(t for t in ids if unit_value(t) >= 0.5)
    sampler = Sampler([SamplingRule(name="half", rate=0.5)])
    hook = RegexRedactor("emails", [r"[\w.]+@[\w.]+"])
    llm.replies["/v1/chat/completions"].extend([openai_text("ok"), openai_text("ok")])
    client = _openai_client(llm)
    sink = ListSink()
    for trace_id in (kept_id, dropped_id):
        with observe(
            sink, trace_id=trace_id, sdk="openai", mode="shadow", sampler=sampler, redactor=hook
        ) as o:
            o.call(client.chat.completions.create, model="m", messages=[_user("a@b.com here")])
    (snapshot,) = sink.snapshots
    assert snapshot.trace_id == kept_id
    assert (snapshot.sampling.rule, snapshot.sampling.weight) == ("half", 2.0)
    assert snapshot.redaction == "emails"
    assert "a@b.com" not in json.dumps(snapshot.wire())
    assert sum(r.seen - r.sampled for r in sampler.tally().rows) == 1


def test_observer_into_live_submitter_reaches_the_real_broker(llm: FakeLLM, redis_url: str) -> None:
    """observe → LiveSubmitter → Producer.send_batch: the snapshot lands on the live lane."""
    llm.replies["/v1/chat/completions"].extend(
        [openai_tool_call("call_9", "get_weather", {"city": "Rome"}), openai_text("21 C.")]
    )
    with Producer(redis_url) as producer, LiveSubmitter(producer.send_batch) as submitter:
        with observe(submitter, trace_id="run-8", sdk="openai", mode="shadow") as obs:
            _openai_agent(_openai_client(llm), obs, "Weather in Rome?")
        assert submitter.flush(timeout_s=20)
    queued = queued_payloads(redis_url, LANE_QUEUES[Lane.LIVE])
    assert len(queued) == 1
    wire = queued[0][0]
    assert obs.snapshot is not None
    assert Snapshot.model_validate(wire).snapshot_id == obs.snapshot.snapshot_id


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _two_call_agent(client: Any, obs: Any, messages: list[Any], after_tool: list[Any]) -> str:
    """Call, answer the tool call, append ``after_tool`` messages, call again."""
    reply = obs.call(client.chat.completions.create, model="m", messages=messages, tools=[WEATHER])
    message = reply.choices[0].message
    messages.append(message)
    for call in message.tool_calls or ():
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 9}'})
    messages.extend(after_tool)
    final = obs.call(client.chat.completions.create, model="m", messages=messages, tools=[WEATHER])
    return str(final.choices[0].message.content)


def _script_tool_then_text(llm: FakeLLM, text: str = "9 C, per the weather tool.") -> None:
    llm.replies["/v1/chat/completions"].extend(
        [openai_tool_call("call_w", "get_weather", {"city": "Bergen"}), openai_text(text)]
    )


def test_the_default_mode_is_off_and_captures_nothing(llm: FakeLLM) -> None:
    """observe() without a mode submits nothing and counts no capture; the agent still runs."""
    llm.replies["/v1/chat/completions"].append(openai_text("ok"))
    sink = ListSink()
    with observe(sink, trace_id="off-1", sdk="openai") as obs:
        reply = obs.call(
            _openai_client(llm).chat.completions.create, model="m", messages=[_user("hi")]
        )
    assert reply.choices[0].message.content == "ok"
    assert (obs.mode, obs.outcome, obs.active) == ("off", "off", False)
    assert sink.snapshots == []


def test_modes_are_case_insensitive_and_enforce_is_refused_in_any_case(llm: FakeLLM) -> None:
    """SHADOW submits, OFF captures nothing; ENFORCE/Enforce are refused naming the reason."""
    for spelled in ("ENFORCE", "Enforce", "enforce"):
        with pytest.raises(ValueError, match="cannot undo an agent's actions"):
            observe(ListSink(), trace_id="t", sdk="openai", mode=spelled)
    with pytest.raises(ValueError, match="not supported"):
        observe(ListSink(), trace_id="t", sdk="openai", mode="loud")
    llm.replies["/v1/chat/completions"].extend([openai_text("a"), openai_text("b")])
    client = _openai_client(llm)
    sinks = {"SHADOW": ListSink(), "OFF": ListSink()}
    for mode, sink in sinks.items():
        with observe(sink, trace_id=f"case-{mode}", sdk="openai", mode=mode) as obs:
            obs.call(client.chat.completions.create, model="m", messages=[_user("hi")])
    assert len(sinks["SHADOW"].snapshots) == 1
    assert sinks["OFF"].snapshots == []


def test_a_loop_injected_user_message_stays_inside_the_invocation(llm: FakeLLM) -> None:
    """A user message the loop appends after a tool result stays inside this invocation's window."""
    # The judged request is still the input's last user message; the tool call and its result
    # stay in the window too.
    _script_tool_then_text(llm)
    sink = ListSink()
    messages: list[Any] = [_user("Weather in Bergen?")]
    reminder = _user("Reminder: cite the tool you used.")
    with observe(sink, trace_id="inj-1", sdk="openai", mode="shadow") as obs:
        _two_call_agent(_openai_client(llm), obs, messages, [reminder])
    (snapshot,) = sink.snapshots
    judged = next(e for e in snapshot.events if e.id == snapshot.unit.event_id)
    assert judged.text == "Weather in Bergen?"
    types = [e.type for e in snapshot.events]
    assert types == [
        EventType.USER,
        EventType.ASSISTANT,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.USER,
        EventType.ASSISTANT,
    ]
    assert snapshot.events[4].text == reminder["content"]
    assert snapshot.events[-1].text == "9 C, per the weather tool."


def test_a_compacted_history_is_not_submitted(llm: FakeLLM) -> None:
    """A history replaced by a summary is COMPACTED_HISTORY: counted, not submitted, answer kept."""
    _script_tool_then_text(llm)
    sink = ListSink()
    client = _openai_client(llm)
    before = observer_stats().get("COMPACTED_HISTORY", 0)
    with observe(sink, trace_id="cmp-1", sdk="openai", mode="shadow") as obs:
        first = [_user("Weather in Bergen?")]
        obs.call(client.chat.completions.create, model="m", messages=first, tools=[WEATHER])
        summary = [{"role": "system", "content": "Summary: the user asked about Bergen."}]
        final = obs.call(client.chat.completions.create, model="m", messages=summary)
    assert final.choices[0].message.content == "9 C, per the weather tool."
    assert obs.outcome == "COMPACTED_HISTORY"
    assert sink.snapshots == []
    assert observer_stats()["COMPACTED_HISTORY"] == before + 1


def test_an_input_without_a_user_message_has_no_boundary(llm: FakeLLM) -> None:
    """A first call whose input holds no user message: BOUNDARY_NOT_FOUND, nothing submitted."""
    llm.replies["/v1/chat/completions"].append(openai_text("Good morning."))
    sink = ListSink()
    before = observer_stats().get("BOUNDARY_NOT_FOUND", 0)
    with observe(sink, trace_id="nob-1", sdk="openai", mode="shadow") as obs:
        system_only = [{"role": "system", "content": "Greet the operator."}]
        obs.call(_openai_client(llm).chat.completions.create, model="m", messages=system_only)
    assert obs.outcome == "BOUNDARY_NOT_FOUND"
    assert sink.snapshots == []
    assert observer_stats()["BOUNDARY_NOT_FOUND"] == before + 1


def test_an_invocation_over_the_capture_limit_is_not_submitted(llm: FakeLLM) -> None:
    """Over the capture limit: EVIDENCE_OVER_LIMIT, never truncated; under it, submitted whole."""
    # The default limit is the engine's state limit; a smaller one can be given.
    assert Limits().max_state_chars == CAPTURE_LIMIT_CHARS
    client = _openai_client(llm)
    before = observer_stats().get("EVIDENCE_OVER_LIMIT", 0)
    outcomes = []
    for trace_id, limit, result in (
        ("big-1", CAPTURE_LIMIT_CHARS, "x" * (CAPTURE_LIMIT_CHARS + 1)),
        ("big-2", 400, "short"),
        ("big-3", CAPTURE_LIMIT_CHARS, "short"),
    ):
        _script_tool_then_text(llm)
        sink = ListSink()
        with observe(
            sink, trace_id=trace_id, sdk="openai", mode="shadow", capture_limit_chars=limit
        ) as obs:
            messages: list[Any] = [_user("Weather in Bergen?")]
            reply = obs.call(client.chat.completions.create, model="m", messages=messages)
            messages.append(reply.choices[0].message)
            messages.append({"role": "tool", "tool_call_id": "call_w", "content": result})
            obs.call(client.chat.completions.create, model="m", messages=messages)
        outcomes.append((obs.outcome, len(sink.snapshots)))
    assert outcomes == [("EVIDENCE_OVER_LIMIT", 0), ("EVIDENCE_OVER_LIMIT", 0), ("submitted", 1)]
    assert observer_stats()["EVIDENCE_OVER_LIMIT"] == before + 2
    with pytest.raises(ValueError, match="capture_limit_chars"):
        observe(ListSink(), trace_id="t", sdk="openai", capture_limit_chars=0)
