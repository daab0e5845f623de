"""The trace model (docs/semantics.md §1): shape, accessors, normalization rules and issues."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from tests.evaluation.order42 import (
    ANSWER,
    CALL_ID,
    REQUEST,
    TOOL_RESULT,
    order42_messages,
    order42_tools,
)
from worker.evaluation import Trace, freeze, thaw


def _call(call_id: Any, name: str = "lookup", arguments: Any = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _assistant(*calls: dict[str, Any], content: Any = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def _tool(call_id: Any, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content, **extra}


def _user(text: Any = "question") -> dict[str, Any]:
    return {"role": "user", "content": text}


def _trace(*messages: dict[str, Any], tools: Any = None) -> Trace:
    return Trace.from_messages("t", list(messages), tools)


# --- shape (docs/semantics.md §1) -----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "   ", None, 42])
def test_id_must_be_a_non_blank_string(bad: Any) -> None:
    """A blank or non-string trace id is rejected with ValueError."""
    with pytest.raises(ValueError, match="trace id"):
        Trace(bad, {})


def test_constructor_and_from_fields_build_equal_traces() -> None:
    """Trace(id, fields, issues) and Trace.from_fields(...) are the same thing."""
    a = Trace("t", {"request": "r"}, ("X",))
    b = Trace.from_fields("t", {"request": "r"}, issues=("X",))
    assert a == b
    assert (b.id, thaw(b.fields), b.issues) == ("t", {"request": "r"}, ("X",))


def test_caller_mutation_after_construction_does_not_leak() -> None:
    """Fields are deep-copied: changing the caller's objects later changes nothing."""
    calls: list[dict[str, Any]] = [{"name": "lookup", "arguments": {"id": 1}}]
    fields: dict[str, Any] = {"tool_calls": calls}
    trace = Trace.from_fields("t", fields)
    calls[0]["arguments"]["id"] = 2
    calls.append({"name": "other"})
    fields["extra"] = 1
    assert thaw(trace.fields) == {"tool_calls": [{"name": "lookup", "arguments": {"id": 1}}]}


def test_fields_are_read_only_all_the_way_down() -> None:
    """The field map, nested maps and nested lists cannot be modified."""
    trace = Trace.from_fields("t", {"tool_calls": [{"name": "lookup", "arguments": {"id": 1}}]})
    with pytest.raises(TypeError):
        trace.fields["x"] = 1  # type: ignore[index]
    calls = trace.fields["tool_calls"]
    assert isinstance(calls, tuple)
    with pytest.raises(TypeError):
        calls[0]["arguments"]["id"] = 2


def test_trace_attributes_cannot_be_reassigned() -> None:
    """A Trace is immutable: setting or deleting attributes raises AttributeError."""
    trace = Trace.from_fields("t", {})
    with pytest.raises(AttributeError):
        trace._id = "other"
    with pytest.raises(AttributeError):
        del trace._fields


@pytest.mark.parametrize("bad", [["a"], "text", None])
def test_fields_must_be_a_mapping(bad: Any) -> None:
    """Fields that are not a mapping are rejected with ValueError."""
    with pytest.raises(ValueError, match="mapping"):
        Trace.from_fields("t", bad)


def test_field_names_must_be_strings() -> None:
    """Non-string field names are rejected instead of being silently stringified."""
    with pytest.raises(ValueError, match="names"):
        Trace.from_fields("t", {1: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1, 2}, object()])
def test_non_json_field_values_are_rejected(bad: Any) -> None:
    """NaN, infinities and non-JSON objects cannot enter a trace."""
    with pytest.raises(ValueError, match="JSON"):
        Trace.from_fields("t", {"x": bad})


@pytest.mark.parametrize("bad", ["PENDING_TOOL_CALL", [1], [""], None])
def test_issues_must_be_an_iterable_of_codes(bad: Any) -> None:
    """Issues are string codes; a bare string, non-strings or blanks are rejected."""
    with pytest.raises(ValueError, match="issue"):
        Trace.from_fields("t", {}, issues=bad)


@pytest.mark.parametrize(
    ("value", "present"),
    [
        ("text", True),
        ("", False),
        ("  \n", False),
        (None, False),
        ([], True),
        ({}, True),
        (0, True),
        (False, True),
        (["a"], True),
    ],
)
def test_has_is_non_null_and_not_blank(value: Any, present: bool) -> None:
    """has(k) is true iff the value is non-null and not a blank string ([] counts)."""
    assert Trace.from_fields("t", {"k": value}).has("k") is present


def test_has_is_false_for_an_absent_key() -> None:
    """An absent key is not present."""
    assert not Trace.from_fields("t", {}).has("k")


def test_has_after_extended_follows_the_new_values() -> None:
    """extended(): a replaced key is decided by its new value, others keep their answer."""
    base = Trace.from_fields("t", {"kept": "x", "blanked": "y", "filled": None})
    trace = base.extended({"blanked": "  ", "filled": [], "added": "z", "nulled": None})
    present = {k for k in ("kept", "blanked", "filled", "added", "nulled") if trace.has(k)}
    assert present == {"kept", "filled", "added"}
    assert (base.has("blanked"), base.has("filled")) == (True, False)  # the original unchanged


def test_text_returns_strings_only() -> None:
    """text(k) is the string value, or "" when absent or not a string."""
    trace = Trace.from_fields("t", {"s": "hello", "n": 3, "l": ["x"]})
    assert (trace.text("s"), trace.text("n"), trace.text("l"), trace.text("missing")) == (
        "hello",
        "",
        "",
        "",
    )


def test_list_returns_lists_only() -> None:
    """list(k) is the list value (a tuple), or () when absent or not a list."""
    trace = Trace.from_fields("t", {"l": ["a", "b"], "s": "ab", "m": {"a": 1}})
    assert (trace.list("l"), trace.list("s"), trace.list("m"), trace.list("x")) == (
        ("a", "b"),
        (),
        (),
        (),
    )


def test_with_field_returns_a_new_trace_and_keeps_issues() -> None:
    """with_field replaces one field in a copy; the original and the issues are unchanged."""
    original = Trace.from_fields("t", {"a": 1, "b": 2}, issues=("X",))
    changed = original.with_field("a", [3])
    assert thaw(changed.fields) == {"a": [3], "b": 2}
    assert changed.issues == ("X",)
    assert thaw(original.fields) == {"a": 1, "b": 2}


def test_with_field_deep_copies_the_new_value() -> None:
    """A value passed to with_field is frozen too: later caller mutation does not leak."""
    value = ["lookup"]
    trace = Trace.from_fields("t", {}).with_field("expected_tool_calls", value)
    value.append("other")
    assert trace.list("expected_tool_calls") == ("lookup",)


def test_with_issues_appends_codes() -> None:
    """with_issues returns a copy with extra issue codes after the existing ones."""
    trace = Trace.from_fields("t", {"a": 1}, issues=("A",)).with_issues("B", "A")
    assert trace.issues == ("A", "B", "A")
    assert thaw(trace.fields) == {"a": 1}


def test_equality_distinguishes_true_one_and_one_point_zero() -> None:
    """Traces compare by canonical JSON, so True, 1 and 1.0 are different values."""
    true, one, one_point_zero = (Trace.from_fields("t", {"v": v}) for v in (True, 1, 1.0))
    assert true != one
    assert one != one_point_zero
    assert true != one_point_zero
    assert Trace.from_fields("t", {"v": 1}) == one
    assert hash(Trace.from_fields("t", {"v": 1})) == hash(one)


def test_repr_shows_field_names_but_not_content() -> None:
    """repr never prints user content (it may reach logs)."""
    text = repr(Trace.from_fields("t", {"request": "SENSITIVE"}))
    assert "request" in text
    assert "SENSITIVE" not in text


def test_copy_and_pickle_round_trip() -> None:
    """A trace survives deepcopy and pickling unchanged."""
    trace = Trace.from_messages("t", order42_messages(), order42_tools())
    assert copy.deepcopy(trace) == trace
    assert pickle.loads(pickle.dumps(trace)) == trace


def test_from_frozen_parts_is_from_messages_then_extended() -> None:
    """Frozen arguments/parameters/fields give from_messages(...).extended(...)'s exact trace."""
    messages = order42_messages()
    messages[2]["tool_calls"][0]["function"]["arguments"] = freeze({"order_id": 42})
    tools = order42_tools()
    tools[0]["function"]["parameters"] = freeze(tools[0]["function"]["parameters"])
    extra = {"contexts": freeze([{"doc": "policy"}]), "claims": ["shipped"]}
    trace = Trace.from_frozen_parts("t", messages, tools, extra, ["TRUNCATED_CONTENT"])
    expected = Trace.from_messages("t", order42_messages(), order42_tools()).extended(
        thaw(extra), ["TRUNCATED_CONTENT"]
    )
    assert trace == expected
    assert repr(trace.fields) == repr(expected.fields)  # key order and exact types too
    assert trace.issues == ("TRUNCATED_CONTENT",)
    assert trace.fields["contexts"] is extra["contexts"]  # kept, not copied


def test_from_frozen_parts_applies_the_same_rules() -> None:
    """Raw argument text is still parsed or flagged; malformed input still raises ValueError."""
    raw = [_user(), _assistant(_call("a", arguments='{"x": 1}'), _call("b", arguments="{x"))]
    trace = Trace.from_frozen_parts("t", raw)
    assert trace == Trace.from_messages("t", raw)
    assert trace.issues == ("INVALID_TOOL_ARGUMENTS", "PENDING_TOOL_CALL")
    with pytest.raises(ValueError, match="role"):
        Trace.from_frozen_parts("t", [{"role": "robot"}])
    with pytest.raises(ValueError, match="mapping"):
        Trace.from_frozen_parts("t", [], fields=["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="issue"):
        Trace.from_frozen_parts("t", [], issues=[" "])


# --- canonical fields (docs/semantics.md §1) ------------------------------------------------------


def test_order42_fields() -> None:
    """The complete example yields every canonical field with the documented shapes."""
    trace = Trace.from_messages("t", order42_messages(), order42_tools())
    assert trace.issues == ()
    call = {
        "id": CALL_ID,
        "name": "lookup_order",
        "arguments": {"order_id": 42},
        "message_index": 2,
        "result": TOOL_RESULT,
        "result_state": "UNKNOWN",
        "result_message_index": 3,
    }
    fields = thaw(trace.fields)
    assert fields["request"] == REQUEST
    assert fields["final_answer"] == ANSWER
    assert fields["tool_calls"] == [call]
    assert fields["tool_results"] == [call]
    assert [m["role"] for m in fields["messages"]] == [
        "SYSTEM",
        "USER",
        "ASSISTANT",
        "TOOL",
        "ASSISTANT",
    ]
    assert fields["messages"][3] == {"role": "TOOL", "text": TOOL_RESULT}
    assert [t["name"] for t in fields["available_tools"]] == ["lookup_order", "cancel_order"]


def test_request_is_the_last_non_blank_user_message() -> None:
    """request is the LAST user message with text; a later blank one is skipped."""
    trace = _trace(
        _user("first"), {"role": "assistant", "content": "a"}, _user("second"), _user("  ")
    )
    assert trace.text("request") == "second"


def test_request_is_empty_without_a_user_message() -> None:
    """With no user message the request is "" (so has() is false)."""
    trace = _trace({"role": "assistant", "content": "hi"})
    assert trace.fields["request"] == ""
    assert not trace.has("request")


def test_final_answer_is_the_last_assistant_turn_after_the_last_user() -> None:
    """final_answer is the last assistant text after the last user message."""
    trace = _trace(
        _user("one"),
        {"role": "assistant", "content": "old"},
        _user("two"),
        {"role": "assistant", "content": "draft"},
        {"role": "assistant", "content": "final"},
    )
    assert trace.text("final_answer") == "final"


def test_final_answer_is_empty_when_the_last_turn_called_tools() -> None:
    """A last assistant turn that made tool calls means there is no final answer yet."""
    trace = _trace(_user(), _assistant(_call("c1"), content="Let me check."))
    assert trace.fields["final_answer"] == ""


def test_final_answer_ignores_an_answer_before_the_last_user_message() -> None:
    """An assistant answer that precedes the last user message is not the final answer."""
    trace = _trace(_user("one"), {"role": "assistant", "content": "old"}, _user("two"))
    assert trace.fields["final_answer"] == ""


def test_preamble_text_next_to_calls_is_not_the_final_answer() -> None:
    """Text sitting with tool calls stays in messages but is not the answer."""
    trace = _trace(_user(), _assistant(_call("c1"), content="Checking."), _tool("c1"))
    assert trace.fields["final_answer"] == ""
    assert trace.fields["messages"][1]["text"] == "Checking."


def test_text_parts_are_joined_with_newlines() -> None:
    """A list of text parts becomes one text joined with "\\n"."""
    content = [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}, "c"]
    trace = _trace(_user(content))
    assert trace.text("request") == "a\nb\nc"


def test_null_content_is_empty_text() -> None:
    """content None (an assistant turn that only calls tools) has text ""."""
    trace = _trace(_user(), _assistant(_call("c1")), _tool("c1"))
    assert trace.fields["messages"][1] == {"role": "ASSISTANT", "text": ""}


def test_developer_role_is_system() -> None:
    """The newer OpenAI 'developer' role is normalized to SYSTEM."""
    trace = _trace({"role": "developer", "content": "rules"}, _user())
    assert trace.fields["messages"][0] == {"role": "SYSTEM", "text": "rules"}


def test_refusal_is_the_text_of_an_assistant_without_content() -> None:
    """An assistant refusal string (OpenAI) is the message text when content is empty."""
    trace = _trace(_user(), {"role": "assistant", "content": None, "refusal": "I can't."})
    assert trace.text("final_answer") == "I can't."


def test_refusal_part_is_text() -> None:
    """A refusal content part counts as the message's text, not as unsupported content."""
    content = [{"type": "refusal", "refusal": "I can't help with that."}]
    trace = _trace(_user(), {"role": "assistant", "content": content})
    assert trace.issues == ()
    assert trace.text("final_answer") == "I can't help with that."


def test_tool_calls_keep_first_appearance_order_and_indices() -> None:
    """Calls are listed in first-appearance order with message and result indices."""
    trace = _trace(
        _user(),
        _assistant(_call("b", "second"), _call("a", "first")),
        _tool("a", "ra"),
        _tool("b", "rb"),
        {"role": "assistant", "content": "done"},
    )
    calls = thaw(trace.fields["tool_calls"])
    assert [(c["id"], c["message_index"], c["result_message_index"]) for c in calls] == [
        ("b", 1, 3),
        ("a", 1, 2),
    ]


def test_tool_results_are_the_calls_with_a_result() -> None:
    """tool_results holds exactly the calls that have a result, with the same contents."""
    trace = _trace(_user(), _assistant(_call("a"), _call("b")), _tool("b", "rb"))
    calls, results = thaw(trace.fields["tool_calls"]), thaw(trace.fields["tool_results"])
    assert results == [calls[1]]
    assert "result" not in calls[0]


def test_arguments_are_parsed_json_objects() -> None:
    """A JSON-string arguments value becomes a JSON object (an object given as-is is kept)."""
    trace = _trace(
        _user(),
        _assistant(_call("a", arguments='{"q": [1, 2.5, true]}'), _call("b", arguments={"x": 1})),
        _tool("a"),
        _tool("b"),
    )
    args = [c["arguments"] for c in thaw(trace.fields["tool_calls"])]
    assert args == [{"q": [1, 2.5, True]}, {"x": 1}]
    assert trace.issues == ()


def test_missing_arguments_mean_an_empty_object() -> None:
    """A call without arguments has arguments {} and no issue."""
    call = {"id": "a", "type": "function", "function": {"name": "now"}}
    trace = _trace(_user(), _assistant(call), _tool("a"))
    assert thaw(trace.fields["tool_calls"])[0]["arguments"] == {}
    assert trace.issues == ()


def test_result_is_text_parts_joined_with_newlines() -> None:
    """A tool result made of text parts is joined with "\\n"."""
    parts = [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}]
    trace = _trace(_user(), _assistant(_call("a")), _tool("a", parts))
    assert trace.fields["tool_results"][0]["result"] == "line 1\nline 2"


@pytest.mark.parametrize(
    ("extra", "state"),
    [
        ({}, "UNKNOWN"),
        ({"is_error": True}, "ERROR"),
        ({"is_error": False}, "SUCCESS"),
        ({"status": "error"}, "ERROR"),
        ({"status": "success"}, "SUCCESS"),
        ({"status": "not a word!"}, "UNKNOWN"),
    ],
)
def test_result_state(extra: dict[str, Any], state: str) -> None:
    """result_state is UNKNOWN unless the tool message carries is_error or a status name."""
    trace = _trace(_user(), _assistant(_call("a")), _tool("a", **extra))
    assert trace.fields["tool_calls"][0]["result_state"] == state


def test_no_catalog_means_no_available_tools_field() -> None:
    """tools=None: the catalog was not provided, so the key is absent."""
    trace = Trace.from_messages("t", order42_messages())
    assert "available_tools" not in trace.fields
    assert not trace.has("available_tools")


def test_empty_catalog_is_present_and_empty() -> None:
    """tools=[]: no tools were available; the key is present with an empty list."""
    trace = Trace.from_messages("t", order42_messages(), [])
    assert trace.fields["available_tools"] == ()
    assert trace.has("available_tools")


def test_plain_and_openai_tool_specs_normalize_alike() -> None:
    """Both catalog styles become {name, description, parameters}; missing parts default."""
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": "a", "description": "A", "parameters": {}}},
        {"name": "b", "description": "B", "parameters": {"type": "object"}},
        {"name": "c"},
    ]
    trace = Trace.from_messages("t", [_user()], tools)
    assert thaw(trace.fields["available_tools"]) == [
        {"name": "a", "description": "A", "parameters": {}},
        {"name": "b", "description": "B", "parameters": {"type": "object"}},
        {"name": "c", "description": "", "parameters": {}},
    ]


# --- issues (docs/semantics.md §1) ----------------------------------------------------------------


@pytest.mark.parametrize("call_id", [None, "", "   "])
def test_blank_call_id_is_ambiguous_and_ignored(call_id: Any) -> None:
    """A tool call with a null or blank id adds AMBIGUOUS_CALL_ID and is not registered."""
    trace = _trace(_user(), _assistant(_call(call_id)))
    assert trace.issues == ("AMBIGUOUS_CALL_ID",)
    assert trace.fields["tool_calls"] == ()


def test_repeated_call_id_is_ambiguous_and_the_repeat_ignored() -> None:
    """A call id seen before adds AMBIGUOUS_CALL_ID; only the first call is kept."""
    trace = _trace(
        _user(), _assistant(_call("a", "first")), _tool("a"), _assistant(_call("a", "again"))
    )
    assert trace.issues == ("AMBIGUOUS_CALL_ID",)
    assert [c["name"] for c in trace.list("tool_calls")] == ["first"]


def test_result_with_unknown_id_is_unpaired() -> None:
    """A tool result naming no registered call adds UNPAIRED_TOOL_RESULT."""
    trace = _trace(_user(), _assistant(_call("a")), _tool("a"), _tool("zzz"))
    assert trace.issues == ("UNPAIRED_TOOL_RESULT",)


def test_result_before_its_call_is_unpaired() -> None:
    """A result that arrives before its call cannot pair; the later call stays pending."""
    trace = _trace(_user(), _tool("a"), _assistant(_call("a")))
    assert trace.issues == ("UNPAIRED_TOOL_RESULT", "PENDING_TOOL_CALL")
    assert trace.fields["tool_results"] == ()


def test_second_result_for_a_call_is_unpaired() -> None:
    """A call already holding a result rejects another one; the first result is kept."""
    trace = _trace(_user(), _assistant(_call("a")), _tool("a", "first"), _tool("a", "second"))
    assert trace.issues == ("UNPAIRED_TOOL_RESULT",)
    assert trace.fields["tool_calls"][0]["result"] == "first"


def test_result_name_mismatch_is_unpaired() -> None:
    """A tool message whose name differs from the call's name does not pair."""
    trace = _trace(_user(), _assistant(_call("a", "lookup")), _tool("a", name="cancel"))
    assert trace.issues == ("UNPAIRED_TOOL_RESULT", "PENDING_TOOL_CALL")


def test_result_with_matching_name_pairs() -> None:
    """A tool message with the call's name pairs normally."""
    trace = _trace(_user(), _assistant(_call("a", "lookup")), _tool("a", name="lookup"))
    assert trace.issues == ()


def test_pending_tool_call_is_reported_once() -> None:
    """Any number of calls without results add PENDING_TOOL_CALL exactly once, at the end."""
    trace = _trace(_user(), _assistant(_call("a"), _call("b"), _call("c")), _tool("b"))
    assert trace.issues == ("PENDING_TOOL_CALL",)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f1"}},
    ],
)
def test_non_text_message_parts_are_unsupported(part: dict[str, Any]) -> None:
    """Image, audio and file parts add UNSUPPORTED_MESSAGE_CONTENT; text parts are kept."""
    trace = _trace(_user([{"type": "text", "text": "look"}, part]))
    assert trace.issues == ("UNSUPPORTED_MESSAGE_CONTENT",)
    assert trace.text("request") == "look"


def test_each_unsupported_part_is_recorded_duplicates_kept() -> None:
    """Issues may contain duplicates: two image parts give two codes."""
    image = {"type": "image_url", "image_url": {"url": "u"}}
    trace = _trace(_user([image, image]))
    assert trace.issues == ("UNSUPPORTED_MESSAGE_CONTENT", "UNSUPPORTED_MESSAGE_CONTENT")


def test_non_text_tool_result_parts_are_unsupported_but_text_attached() -> None:
    """Each non-text result part adds UNSUPPORTED_TOOL_CONTENT; the text parts still attach."""
    parts = [
        {"type": "text", "text": "shipped"},
        {"type": "image_url", "image_url": {"url": "u"}},
        {"type": "file", "file": {"file_id": "f"}},
    ]
    trace = _trace(_user(), _assistant(_call("a")), _tool("a", parts))
    assert trace.issues == ("UNSUPPORTED_TOOL_CONTENT", "UNSUPPORTED_TOOL_CONTENT")
    assert trace.fields["tool_results"][0]["result"] == "shipped"


def test_unpaired_result_content_is_not_inspected() -> None:
    """An ignored (unpaired) result block only adds UNPAIRED_TOOL_RESULT."""
    trace = _trace(_user(), _tool("zzz", [{"type": "image_url", "image_url": {"url": "u"}}]))
    assert trace.issues == ("UNPAIRED_TOOL_RESULT",)


def test_reasoning_content_is_dropped_silently() -> None:
    """reasoning_content and thinking/reasoning parts are neither text nor an issue."""
    message = {
        "role": "assistant",
        "reasoning_content": "SECRET-REASONING",
        "content": [
            {"type": "thinking", "thinking": "SECRET-THINKING"},
            {"type": "reasoning", "text": "SECRET-R"},
            {"type": "text", "text": "Answer."},
        ],
    }
    trace = _trace(_user(), message)
    assert trace.issues == ()
    assert trace.text("final_answer") == "Answer."
    assert "SECRET" not in str(thaw(trace.fields))


def test_message_metadata_is_dropped() -> None:
    """Message metadata (ids, annotations, names on non-tool turns) never enters the fields."""
    message = {"role": "user", "content": "q", "name": "alice", "metadata": {"k": "META"}}
    trace = _trace(message)
    assert "META" not in str(thaw(trace.fields))
    assert "alice" not in str(thaw(trace.fields))


@pytest.mark.parametrize("arguments", ['{"order_id": 4', "[1, 2]", '"text"', "42", "", "NaN"])
def test_invalid_tool_arguments_are_an_issue_not_a_crash(arguments: str) -> None:
    """Arguments that are not a JSON object add INVALID_TOOL_ARGUMENTS; the raw text is kept."""
    trace = _trace(_user(), _assistant(_call("a", arguments=arguments)), _tool("a"))
    assert trace.issues == ("INVALID_TOOL_ARGUMENTS",)
    assert trace.fields["tool_calls"][0]["arguments"] == arguments


def test_non_function_tool_call_is_unsupported() -> None:
    """A call of another type (e.g. OpenAI 'custom') is UNSUPPORTED_MESSAGE_CONTENT and ignored."""
    call = {"id": "x", "type": "custom", "custom": {"name": "grep", "input": "a"}}
    trace = _trace(_user(), _assistant(call))
    assert trace.issues == ("UNSUPPORTED_MESSAGE_CONTENT",)
    assert trace.fields["tool_calls"] == ()


def test_call_without_name_is_flagged() -> None:
    """A call with no function name is registered with name "" and flagged MISSING_TOOL_NAME."""
    call = {"id": "a", "type": "function", "function": {"arguments": "{}"}}
    trace = _trace(_user(), _assistant(call), _tool("a"))
    assert trace.issues == ("MISSING_TOOL_NAME",)
    assert trace.fields["tool_calls"][0]["name"] == ""


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ("not a list", "list of message"),
        ({"role": "user"}, "list of message"),
        ([["user", "hi"]], r"messages\[0\] must be an object"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\]\.role"),
        ([{"content": "x"}], r"messages\[0\]\.role"),
        ([{"role": "user", "content": 42}], "content"),
        ([{"role": "user", "content": [{"type": "text", "text": 1}]}], "text must be a string"),
        ([{"role": "assistant", "tool_calls": "x"}], "tool_calls must be a list"),
        ([{"role": "assistant", "tool_calls": [{"id": "a"}]}], "function must be an object"),
    ],
)
def test_malformed_messages_raise_value_error(messages: Any, match: str) -> None:
    """Input that is not OpenAI chat format raises ValueError naming the problem."""
    with pytest.raises(ValueError, match=match):
        Trace.from_messages("t", messages)


@pytest.mark.parametrize(
    "tools", ["lookup", [42], [{"description": "no name"}], [{"type": "function", "function": 1}]]
)
def test_malformed_catalog_raises_value_error(tools: Any) -> None:
    """A catalog that is not a list of named tool objects raises ValueError."""
    with pytest.raises(ValueError, match="tools"):
        Trace.from_messages("t", [_user()], tools)


def test_from_messages_input_mutation_does_not_leak() -> None:
    """Changing the messages or catalog after from_messages leaves the trace unchanged."""
    messages, tools = order42_messages(), order42_tools()
    trace = Trace.from_messages("t", messages, tools)
    before = thaw(trace.fields)
    messages[1]["content"] = "changed"
    messages.append({"role": "user", "content": "more"})
    tools[0]["function"]["parameters"]["type"] = "array"
    assert thaw(trace.fields) == before
