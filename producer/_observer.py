"""Live observer for agent loops written with the OpenAI or Anthropic SDK.

::

    with observe(producer, trace_id=run_id, sdk="openai", mode="shadow") as obs:
        while True:
            reply = obs.call(client.chat.completions.create, model=m, messages=msgs, tools=tools)
            ...                       # the agent's own loop, unchanged

One :class:`Observation` captures exactly one invocation: each model call's request (messages,
tool catalog, Anthropic ``system``) and response, through :meth:`Observation.call` (a wrapper that
returns the SDK's result untouched) or explicit :meth:`~Observation.record_request` /
:meth:`~Observation.record_response`. When the ``with`` body completes normally, the final
request plus its response — the complete trace, since both APIs are stateless — is parsed by the
importers (``chat_exchange`` / ``anthropic``), each round's catalog is attached to the event that
starts that round's output (``Snapshot.tool_rounds``), the invocation is cut, sampled, redacted
and handed to ``sink.submit`` (a :class:`~producer.LiveSubmitter` or a producer with ``submit``).

Nothing is captured unless asked: ``mode`` defaults to ``"off"`` (no capture, no submission);
``"shadow"`` captures and submits. Modes are case-insensitive; ``enforce`` (any case) is refused.

**The invocation boundary is the input.** The messages passed to the first model call are the
invocation's input; the judged request is the last user message *of that input*, and everything
after it — assistant turns, tool calls and results, and user or system messages the loop itself
appends (a reminder, a nudge) — belongs to this invocation. Earlier turns of the input are
earlier invocations: outside the window, never judged as this one's actions. Nothing is
submitted, and the reason is counted in :func:`observer_stats`, when:

- ``COMPACTED_HISTORY``: a later call's history does not extend the previous one (the same
  messages in order, plus new ones): the app compacted, summarized, truncated or reordered it,
  so the final request no longer holds what the agent saw;
- ``BOUNDARY_NOT_FOUND``: the input holds no user message (no request to judge);
- ``EVIDENCE_OVER_LIMIT``: the invocation's snapshot is larger than ``capture_limit_chars``
  (default: the engine's state limit, ``Limits().max_state_chars``): never truncated, since a
  cut trace would be judged as if it were whole.

Why nothing is submitted when the body raises or is cancelled: a half-run invocation is not an
agent action to judge, and judging it as a failure would blame the agent for the app's crash.

Why observer errors are swallowed (logged as a reason code and counted): evaluation is a
bystander; a bug or odd payload in the observer must never change what the agent returns or
raise into it. Only configuration mistakes fail, and they fail at construction: an unknown SDK,
a ``mode`` other than ``off``/``shadow``, a capture limit below 1. "enforce"-style modes are
refused on purpose: an evaluation that runs after the fact cannot undo the agent's actions, so
it must not pretend to gate them.

Streaming: record the final message (``stream.get_final_completion()`` /
``stream.get_final_message()``); a raw stream object is not a response and marks the
observation ``UNSUPPORTED_RESPONSE``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar

from worker.evaluation import Limits

from ._redaction import Redactor, apply_redaction
from ._sampling import Sampler, replace_fields
from ._units import NotReadyError, invocation_at
from .importers import ParsedTrace, anthropic, chat_exchange, openai_chat
from .snapshot import EventType, Snapshot, ToolRound, ToolSpec

__all__ = [
    "CAPTURE_LIMIT_CHARS",
    "MODES",
    "Observation",
    "SnapshotSink",
    "observe",
    "observer_stats",
]

log = logging.getLogger("evalq.producer.observe")

MODES = ("off", "shadow")
CAPTURE_LIMIT_CHARS = Limits().max_state_chars
"""Default capture limit: an invocation the engine could not fit in one judged state."""
_SDKS = ("openai", "anthropic")
_R = TypeVar("_R")


class SnapshotSink(Protocol):
    """Where finished snapshots go: ``LiveSubmitter`` or a producer's non-blocking ``submit``."""

    def submit(self, snapshot: Snapshot, /) -> object: ...


class _Stats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def read(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


_STATS = _Stats()


def observer_stats() -> dict[str, int]:
    """Process-wide counts: ``submitted``, ``sampled_out``, ``agent_failed`` and error codes."""
    return _STATS.read()


class _ObserverError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _jsonable(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # SDK pydantic objects (a returned message appended to the history)
        return dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(type(value).__name__)


def _plain(value: object) -> Any:
    """A deep, JSON-only copy: the app keeps mutating its message list after the call."""
    try:
        return json.loads(json.dumps(value, default=_jsonable))
    except (TypeError, ValueError):
        raise _ObserverError("UNSERIALIZABLE_PAYLOAD") from None


@dataclass(frozen=True)
class _Round:
    messages_before: int  # history length of this round's request (its output comes next)
    tools: Any  # plain JSON catalog offered to this call ([] when none was offered)


class Observation:
    """Captures one invocation; see the module docstring. Use via :func:`observe`."""

    def __init__(
        self,
        sink: SnapshotSink,
        *,
        trace_id: str,
        sdk: Literal["openai", "anthropic"],
        mode: str = "off",
        sampler: Sampler | None = None,
        redactor: Redactor | None = None,
        agent_version: str | None = None,
        environment: str | None = None,
        session_id: str | None = None,
        metric_set: str | None = None,
        capture_limit_chars: int = CAPTURE_LIMIT_CHARS,
    ) -> None:
        mode = _checked_mode(mode)
        if capture_limit_chars < 1:
            raise ValueError(f"capture_limit_chars must be >= 1, got {capture_limit_chars}")
        if sdk not in _SDKS:
            raise ValueError(f"sdk must be one of {_SDKS}, got {sdk!r}")
        if not trace_id.strip():
            raise ValueError("trace_id must be non-blank")
        self.sink, self.trace_id, self.sdk, self.mode = sink, trace_id, sdk, mode
        self.sampler, self.redactor, self.metric_set = sampler, redactor, metric_set
        self._meta = {"agent_version": agent_version, "environment": environment}
        self._session_id = session_id
        self.capture_limit_chars = capture_limit_chars
        self._input_messages: int | None = None  # length of the first call's history
        self._rounds: list[_Round] = []
        self._messages: list[Any] = []
        self._system: Any = None
        self._tools: Any = []
        self._response: Any = None
        self._broken: str | None = None
        self.outcome: str | None = None
        """After exit: ``submitted``, ``sampled_out``, ``agent_failed``, ``off`` or a code."""
        self.snapshot: Snapshot | None = None
        """After exit: the snapshot handed to the sink, if any."""

    # -- capture -----------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether this observation still captures (mode shadow and nothing broke)."""
        return self.mode == "shadow" and self._broken is None

    def _guard(self, step: Callable[[], None]) -> None:
        if not self.active:
            return
        try:
            step()
        except _ObserverError as exc:
            self._break(exc.code)
        except Exception:  # noqa: BLE001 - observer failures must never reach the agent
            self._break("OBSERVER_ERROR")

    def _break(self, code: str) -> None:
        self._broken = code
        _STATS.add(code)
        log.warning("evalq.observe.error trace=%s reason=%s", self.trace_id, code)

    def record_request(
        self, messages: Sequence[Any], tools: Sequence[Any] | None = None, *, system: Any = None
    ) -> None:
        """Record one model call's request: its full history, catalog and (Anthropic) system."""

        def step() -> None:
            plain = _plain(list(messages))
            if self._input_messages is None:
                self._input_messages = len(plain)
            elif plain[: len(self._messages)] != self._messages:
                raise _ObserverError("COMPACTED_HISTORY")
            catalog = _plain(list(tools)) if tools is not None else []
            self._rounds.append(_Round(len(plain), catalog))
            self._messages, self._tools, self._response = plain, catalog, None
            self._system = _plain(system) if system is not None else None

        self._guard(step)

    def record_response(self, response: Any) -> None:
        """Record the response to the latest request (an SDK object or its dict)."""

        def step() -> None:
            if not self._rounds:
                raise _ObserverError("RESPONSE_WITHOUT_REQUEST")
            plain = _plain(response)
            if not isinstance(plain, dict) or not _is_response(self.sdk, plain):
                raise _ObserverError("UNSUPPORTED_RESPONSE")
            self._response = plain

        self._guard(step)

    def _record_call(self, kwargs: Mapping[str, Any]) -> None:
        messages = kwargs.get("messages")
        if not isinstance(messages, Sequence):
            self._guard(lambda: _raise("MISSING_MESSAGES"))
            return
        self.record_request(messages, kwargs.get("tools"), system=kwargs.get("system"))

    # Callable[..., R], not a ParamSpec: the SDKs' create() methods are overloaded, and a
    # ParamSpec would bind to one overload and reject the others' arguments.
    def call(self, create: Callable[..., _R], /, *args: Any, **kwargs: Any) -> _R:
        """``create(*args, **kwargs)`` (an SDK ``create``), recorded; its result returned as is."""
        self._record_call(kwargs)
        result = create(*args, **kwargs)
        self.record_response(result)
        return result

    async def acall(self, create: Callable[..., Awaitable[_R]], /, *args: Any, **kwargs: Any) -> _R:
        """Async twin of :meth:`call` (``AsyncOpenAI`` / ``AsyncAnthropic`` clients)."""
        self._record_call(kwargs)
        result = await create(*args, **kwargs)
        self.record_response(result)
        return result

    # -- completion --------------------------------------------------------------------------

    def __enter__(self) -> Observation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.mode == "off":
            self.outcome = "off"
        elif exc_type is not None:  # an error or a cancellation: nothing was completed
            self.outcome = "agent_failed"
            _STATS.add("agent_failed")
        elif self._broken is not None:
            self.outcome = self._broken
        else:
            self._finish()
        # never suppresses the agent's exception: returns None

    def _finish(self) -> None:
        try:
            self.outcome = self._submit()
        except _ObserverError as exc:
            self.outcome = exc.code
            self._break(exc.code)
        except Exception:  # noqa: BLE001 - observer failures must never reach the agent
            self.outcome = "OBSERVER_ERROR"
            self._break("OBSERVER_ERROR")
        else:
            _STATS.add(self.outcome)

    def _submit(self) -> str:
        snapshot = self.build()
        if len(snapshot.model_dump_json()) > self.capture_limit_chars:
            raise _ObserverError("EVIDENCE_OVER_LIMIT")
        if self.sampler is not None:
            kept = self.sampler.sample(snapshot)
            if kept is None:
                return "sampled_out"
            snapshot = kept
        try:
            snapshot = apply_redaction(snapshot, self.redactor)
        except ValueError:
            raise _ObserverError("REDACTION_INVALID") from None
        self.snapshot = snapshot
        self.sink.submit(snapshot)
        return "submitted"

    def build(self) -> Snapshot:
        """The invocation's snapshot from what was recorded (raises ``_ObserverError``)."""
        if self._response is None:
            raise _ObserverError("NO_RESPONSE")
        trace = self._parse(self._messages, self._tools, self._response)
        offsets = self._first_event_offsets()
        rounds = self._tool_rounds(trace, offsets)
        trace = replace(trace, tool_rounds=rounds, tools=_specs_or_none(trace, rounds))
        try:
            snapshot = invocation_at(trace, self._request_index(trace, offsets))
        except NotReadyError as exc:
            raise _ObserverError(exc.code) from None
        if self.metric_set is not None:
            snapshot = replace_fields(snapshot, metric_set=self.metric_set)
        return snapshot

    def _record(
        self, messages: list[Any], tools: Any, response: Any, *, system: bool = True
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"messages": messages, "tools": tools}
        if system and self._system is not None:
            request["system"] = self._system
        record: dict[str, Any] = {"id": self.trace_id, "request": request, "metadata": self._meta}
        if response is not None:
            record["response"] = response
        if self._session_id is not None:
            record["session_id"] = self._session_id
        return record

    def _parse(
        self, messages: list[Any], tools: Any, response: Any, *, system: bool = True
    ) -> ParsedTrace:
        record = self._record(messages, tools, response, system=system)
        try:
            if self.sdk == "anthropic":
                return anthropic.parse(record, self.trace_id)[0]
            if response is None:  # no response: the history alone (Chat Completions messages)
                return _openai_messages(record)
            return chat_exchange.parse(record, self.trace_id)[0]
        except ValueError:  # FieldError or pydantic validation: the payload is not parseable
            raise _ObserverError("UNPARSABLE_CAPTURE") from None

    def _first_event_offsets(self) -> list[int]:
        """Index of the first event of each history message (plus one past the last).

        Ids are sequential (``trace:n``) and a message's event count does not depend on its
        neighbours, so each message is parsed alone once: O(messages), not O(rounds x history).
        """
        offset = len(self._parse([], [], None).events)  # the system prompt's events, if any
        offsets = [offset]
        for message in self._messages:
            offset += len(self._parse([message], [], None, system=False).events)
            offsets.append(offset)
        return offsets

    def _request_index(self, full: ParsedTrace, offsets: list[int]) -> int:
        """Index of the judged request: the last user event of the first call's input."""
        input_end = offsets[self._input_messages or 0]
        users = [i for i, e in enumerate(full.events[:input_end]) if e.type is EventType.USER]
        if not users:
            raise _ObserverError("BOUNDARY_NOT_FOUND")
        return users[-1]

    def _tool_rounds(self, full: ParsedTrace, offsets: list[int]) -> tuple[ToolRound, ...]:
        """Each round's catalog, placed at the first event of that round's output.

        Round k's output is the message right after its request's history. A round whose
        position holds no assistant event (the app rewrote its history) is left out.
        """
        by_id = {event.id: event for event in full.events}
        catalogs: dict[str, tuple[ToolSpec, ...]] = {}  # agents mostly reuse one catalog
        rounds: list[ToolRound] = []
        for round_ in self._rounds:
            if round_.messages_before >= len(offsets):
                continue
            event = by_id.get(f"{self.trace_id}:{offsets[round_.messages_before]}")
            if event is not None and event.type is EventType.ASSISTANT:
                key = json.dumps(round_.tools, sort_keys=True)
                if key not in catalogs:
                    catalogs[key] = self._parse([], round_.tools, None, system=False).tools or ()
                rounds.append(ToolRound(event_id=event.id, tools=catalogs[key]))
        return tuple(rounds)


def _specs_or_none(trace: ParsedTrace, rounds: tuple[ToolRound, ...]) -> Any:
    """The last offered catalog: the SDK call recorded exactly what the model saw."""
    return rounds[-1].tools if rounds else trace.tools


def _openai_messages(record: dict[str, Any]) -> ParsedTrace:
    request = record["request"]
    return openai_chat.parse({**request, "id": record["id"]}, record["id"])[0]


def _is_response(sdk: str, plain: dict[str, Any]) -> bool:
    if sdk == "openai":
        return isinstance(plain.get("choices"), list)
    return plain.get("type") == "message" or isinstance(plain.get("content"), list)


def _raise(code: str) -> None:
    raise _ObserverError(code)


def _checked_mode(mode: str) -> str:
    """``mode`` in lower case, or ValueError naming why (``enforce`` is refused on purpose)."""
    chosen = mode.strip().lower() if isinstance(mode, str) else mode
    if chosen == "enforce":
        raise ValueError(
            f"observer mode {mode!r} is refused: evaluation after the fact cannot undo an "
            f"agent's actions, so it must not pretend to gate them; use one of {MODES}"
        )
    if chosen not in MODES:
        raise ValueError(f"observer mode {mode!r} is not supported; use one of {MODES}")
    return str(chosen)


def observe(
    sink: SnapshotSink,
    *,
    trace_id: str,
    sdk: Literal["openai", "anthropic"],
    mode: str = "off",
    sampler: Sampler | None = None,
    redactor: Redactor | None = None,
    agent_version: str | None = None,
    environment: str | None = None,
    session_id: str | None = None,
    metric_set: str | None = None,
    capture_limit_chars: int = CAPTURE_LIMIT_CHARS,
) -> Observation:
    """Start observing one invocation (a context manager); see the module docstring.

    ``mode`` defaults to ``"off"``: pass ``mode="shadow"`` to capture and submit.
    """
    return Observation(
        sink,
        trace_id=trace_id,
        sdk=sdk,
        mode=mode,
        sampler=sampler,
        redactor=redactor,
        agent_version=agent_version,
        environment=environment,
        session_id=session_id,
        metric_set=metric_set,
        capture_limit_chars=capture_limit_chars,
    )
