"""LangChain / LangSmith run trees (docs/formats.md).

Lines hold runs: one run object (``run_type``, optionally nested ``child_runs`` as
``Client.list_runs`` returns them), a ``{"post": [...], "patch": [...]}`` ingestion batch, or a
JSON array of runs. A run's PATCH updates its POST by run id. Runs are grouped by ``trace_id``
(the root run's id); a trace closes when its root has ended. Per trace: ``llm`` runs (in
``dotted_order``) give the chat history (``inputs.messages`` as serialized LangChain messages,
constructor or plain form) and their output (``generations[0][0].message``); ``tool`` runs give
results for calls the history does not answer (``extra.tool_call_id``; a ``ToolMessage`` with
``status: "error"`` is an error result, not an issue); the catalog is the last llm run's
``extra.invocation_params.tools`` (absent → ``None``). Sessions are keyed by
``extra.metadata.thread_id``/``session_id``/``conversation_id``.

A run without ``end_time`` (never patched: the agent crashed, or the export was taken mid-run)
is still imported when the reader closes the trace (the file ended, or the open-trace bound
pushed it out): the trace carries ``RUN_NOT_ENDED``, so every snapshot cut from it is
incomplete and counted where coverage is computed, instead of vanishing as "not ready". A model
call that never returned leaves an empty assistant event flagged ``RUN_NOT_ENDED``; when the
root never reached a model call, its own ``inputs`` (``messages``, or a single text input) give
the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from ._common import Extras, FieldError, Item, ParsedTrace, as_obj, tool_spec
from ._spans import ChatCall, ToolRun, build_events, merge_prefixes

__all__ = ["NAME", "RUN_NOT_ENDED", "detect", "merge", "parse", "split"]

NAME = "langsmith"
RUN_NOT_ENDED = "RUN_NOT_ENDED"  # a run never patched with an end: the trace is incomplete
_ROLES = {
    "human": "user",
    "humanmessage": "user",
    "user": "user",
    "ai": "assistant",
    "aimessage": "assistant",
    "aimessagechunk": "assistant",
    "assistant": "assistant",
    "system": "system",
    "systemmessage": "system",
    "tool": "tool",
    "toolmessage": "tool",
}


def detect(record: Mapping[str, Any]) -> bool:
    """A run (``run_type``) or an ingestion batch (``post``/``patch`` lists)."""
    if isinstance(record.get("run_type"), str):
        return True
    return isinstance(record.get("post"), list) or isinstance(record.get("patch"), list)


def split(record: dict[str, Any], session: bool) -> Iterator[Any]:  # noqa: ARG001
    """The runs of one line (nested child runs flattened), keyed by trace id."""

    runs: list[tuple[str, Any]] = []
    if "run_type" in record:
        runs.append(("$", record))
    for key in ("post", "patch"):
        for index, run in enumerate(record.get(key) or []):
            runs.append((f"{key}[{index}]", run))
    for path, raw in runs:
        for run in _flatten(as_obj(raw, path), path):
            trace_id = run.get("trace_id") or run.get("id")
            if not isinstance(trace_id, str) or not trace_id:
                raise FieldError(f"{path}.trace_id", "MISSING_FIELD", "run has no trace id")
            root = run.get("parent_run_id") is None and run.get("id") == trace_id
            yield Item(trace_id, run, closes=root and run.get("end_time") is not None)


def _flatten(run: dict[str, Any], path: str) -> Iterator[dict[str, Any]]:
    yield run
    children = run.get("child_runs") or []
    if not isinstance(children, list):
        raise FieldError(f"{path}.child_runs", "INVALID_FIELD", "expected a list")
    for index, child in enumerate(children):
        yield from _flatten(
            as_obj(child, f"{path}.child_runs[{index}]"), f"{path}.child_runs[{index}]"
        )


def merge(traces: list[ParsedTrace]) -> list[ParsedTrace]:
    """Each user turn is its own root run repeating the history: keep the longest."""
    return merge_prefixes(traces)


def parse(key: str, payloads: list[Any]) -> list[ParsedTrace]:
    """One trace from its runs (POST and PATCH of a run merged by run id)."""
    runs: dict[str, dict[str, Any]] = {}
    for payload in payloads:
        run_id = str(payload.get("id"))
        runs[run_id] = {
            **runs.get(run_id, {}),
            **{k: v for k, v in payload.items() if v is not None},
        }
    ordered = sorted(
        runs.values(), key=lambda r: str(r.get("dotted_order") or r.get("start_time") or "")
    )
    llms = [r for r in ordered if r.get("run_type") == "llm"]
    open_runs = any(r.get("end_time") is None for r in ordered)
    calls = [_call(r) for r in llms]
    if not calls and open_runs:
        calls = _root_request(runs.get(key))
    # A tool run still open has no result yet: its call stays pending, never "answered".
    tools = [_tool(r) for r in ordered if r.get("run_type") == "tool" and r.get("end_time")]
    events = tuple(build_events(key, calls, tools))
    return [
        ParsedTrace(
            trace_id=key,
            events=events,
            source=NAME,
            tools=_catalog(llms[-1]) if llms else None,
            extras=Extras(session_id=_session(ordered)),
            not_ready="NO_CONTENT" if not events else None,
            issues=(RUN_NOT_ENDED,) if open_runs else (),
        )
    ]


def _obj(value: object) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (runs are loosely shaped)."""
    return value if isinstance(value, dict) else {}


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)  # LangSmith: naive UTC


def _call(run: dict[str, Any]) -> ChatCall:
    batches = _obj(run.get("inputs")).get("messages")
    history = (
        batches[0]
        if isinstance(batches, list) and batches and isinstance(batches[0], list)
        else batches
    )
    messages = [_message(m) for m in history] if isinstance(history, list) else None
    if run.get("end_time") is None and not run.get("outputs"):
        # The model call never returned: its output is missing, not empty.
        start = _time(run.get("start_time"))
        return ChatCall(start, None, messages, None, (RUN_NOT_ENDED,))
    generations = _obj(run.get("outputs")).get("generations")
    out: list[dict[str, Any]] = []
    if (
        isinstance(generations, list)
        and generations
        and isinstance(generations[0], list)
        and generations[0]
    ):
        first = generations[0][0]
        if isinstance(first, dict) and first.get("message") is not None:
            out = [_message(first["message"])]
        elif isinstance(first, dict) and isinstance(first.get("text"), str):
            out = [{"role": "assistant", "content": first["text"]}]
    return ChatCall(_time(run.get("start_time")), _time(run.get("end_time")), messages, out)


def _root_request(root: dict[str, Any] | None) -> list[ChatCall]:
    """The request of an open trace that never reached a model call (its root's inputs)."""
    inputs = _obj((root or {}).get("inputs"))
    raw = inputs.get("messages")
    if isinstance(raw, list) and raw and isinstance(raw[0], list):
        raw = raw[0]
    messages: list[dict[str, Any]] = []
    if isinstance(raw, list):
        messages = [_message(m) for m in raw]
    else:
        texts = [v for v in inputs.values() if isinstance(v, str)]
        if len(texts) == 1:  # {"input": "..."} / {"question": "..."}: one text is the request
            messages = [{"role": "user", "content": texts[0]}]
    if not messages or root is None:
        return []
    start = _time(root.get("start_time"))
    return [ChatCall(start, None, messages, None, (RUN_NOT_ENDED,))]


def _message(raw: object) -> dict[str, Any]:
    """A serialized LangChain message (constructor or plain form) → Chat Completions shape."""
    obj = _obj(raw)
    body = _obj(obj.get("kwargs")) or obj
    kind = obj.get("type")
    if kind == "constructor" and isinstance(obj.get("id"), list) and obj["id"]:
        kind = obj["id"][-1]
    role = _ROLES.get(str(kind or body.get("role") or "").lower())
    if role is None:
        return {"role": str(kind)}
    message: dict[str, Any] = {"role": role, "content": _content(body.get("content"))}
    if role == "tool":
        message["tool_call_id"] = body.get("tool_call_id")
    calls = body.get("tool_calls")
    if role == "assistant" and isinstance(calls, list) and calls:
        message["tool_calls"] = [_tool_call(c) for c in calls]
    return message


def _content(content: object) -> object:
    if not isinstance(content, list):
        return content
    # Anthropic-style blocks: tool_use blocks are repeated in tool_calls, so count them once.
    return [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_use")]


def _tool_call(call: object) -> dict[str, Any]:
    obj = call if isinstance(call, dict) else {}
    return {
        "id": obj.get("id"),
        "type": "function",
        "function": {"name": obj.get("name"), "arguments": obj.get("args")},
    }


def _tool(run: dict[str, Any]) -> ToolRun:
    extra = _obj(run.get("extra"))
    output = _obj(run.get("outputs")).get("output")
    body = _obj(output.get("kwargs", output)) if isinstance(output, dict) else {}
    content = body.get("content", output if isinstance(output, str) else None)
    call_id = extra.get("tool_call_id") or body.get("tool_call_id")
    return ToolRun(
        call_id=call_id if isinstance(call_id, str) else None,
        name=run.get("name") if isinstance(run.get("name"), str) else None,
        result=_text(content),
        end=_time(run.get("end_time")),
        error=body.get("status") == "error" or bool(run.get("error")),
    )


def _text(content: object) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def _catalog(run: dict[str, Any]) -> tuple[Any, ...] | None:
    tools = _obj(_obj(run.get("extra")).get("invocation_params")).get("tools")
    if not isinstance(tools, list):
        return None
    return tuple(tool_spec(t, f"extra.invocation_params.tools[{i}]") for i, t in enumerate(tools))


def _session(runs: list[dict[str, Any]]) -> str | None:
    for run in runs:
        metadata = _obj(_obj(run.get("extra")).get("metadata"))
        for key in ("thread_id", "session_id", "conversation_id"):
            if isinstance(metadata.get(key), str) and metadata[key]:
                return str(metadata[key])
    return None
