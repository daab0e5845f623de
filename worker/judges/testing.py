"""Testing aid: a synthetic judge server (System One, Chat Completions) on loopback HTTP.

A public module (not imported by ``worker.judges`` itself: it needs aiohttp's server). It answers
like :class:`~worker.judges.SyntheticJudge` (usage included) and exists so that judge tests,
benchmarks and the compose stack talk to a real server instead of mocks. Knobs: a fixed
``latency_ms``, an optional API key (wrong or missing ``Bearer`` → 401), and a per-request
*script* of :class:`Fault` s consumed in order (HTTP statuses with ``Retry-After``, stalls,
broken bodies, edited replies). Every request is logged (path, headers, body) for tests to read.

The latency counts from the request's arrival: the server reads, checks and answers a request
while its latency runs, as a real judge's own work is part of its latency. Before, it slept
first and worked after, so a server loaded by a benchmark's backfill answered later than its
latency by its own processing and queue (docs/concurrency.md, "Thirteenth round").

In-process (tests, benches)::

    with serve_in_thread(latency_ms=100) as server:
        judge = SystemOneJudge(server.base_url, api_key="k")

Standalone: ``python -m worker.judges.testing --port 8080 --latency-ms 100`` prints
``listening on http://127.0.0.1:PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson
from aiohttp import web

from worker.canonical_json import utf16_units

from ._strict import strict_loads
from ._synthetic import SYNTHETIC_MODEL, synthetic_response, synthetic_usage, wire_units
from ._wire import ChoiceAnswer, JudgeRequest, NoulAnswer, ScoreAnswer

__all__ = [
    "Fault",
    "JudgeServer",
    "LoggedRequest",
    "drop",
    "duplicate_key",
    "edit",
    "edit_content",
    "finish_reason",
    "invalid_json",
    "main",
    "missing_usage",
    "raw",
    "serve_in_thread",
    "stall",
    "status",
    "synthetic_response",
]

Edit = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Fault:
    """What the server does with one request instead of (or on top of) a normal answer.

    ``status``/``body`` replace the reply; ``stall`` never answers (until the server stops);
    ``drop`` closes the connection without a reply; ``delay_ms`` overrides the latency;
    ``edit`` rewrites the reply object, ``edit_content`` the chat content object, ``content``
    replaces the chat content text and ``rewrite`` the final text. Values an edit puts in may
    be non-finite: replies are written with ``NaN`` allowed.
    """

    status: int = 200
    body: str | bytes | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    stall: bool = False
    delay_ms: float | None = None
    edit: Edit | None = None
    edit_content: Edit | None = None
    content: str | None = None
    rewrite: Callable[[str], str] | None = None
    drop: bool = False


_NORMAL = Fault()


def status(code: int, *, retry_after: str | float | None = None, body: str | None = None) -> Fault:
    """An HTTP error reply (JSON body ``{"error": {"message": ...}}`` unless ``body`` is given)."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Fault(status=code, body=body, headers=MappingProxyType(headers))


def raw(text: str | bytes, code: int = 200) -> Fault:
    """A reply whose body is exactly ``text`` (bytes are sent as they are)."""
    return Fault(status=code, body=text)


def stall() -> Fault:
    """Never answer (the request hangs until the client gives up or the server stops)."""
    return Fault(stall=True)


def drop() -> Fault:
    """Close the connection without answering (the client sees a disconnect)."""
    return Fault(drop=True)


def edit(fn: Edit) -> Fault:
    """Reply with ``fn(normal reply object)``."""
    return Fault(edit=fn)


def edit_content(fn: Edit) -> Fault:
    """Chat only: reply with ``fn(normal content object)`` as the message content."""
    return Fault(edit_content=fn)


def invalid_json() -> Fault:
    """A 200 reply that is not JSON."""
    return raw('{"model": "synthetic", "answers": ')


def missing_usage() -> Fault:
    """A normal reply without its ``usage`` object."""
    return edit(lambda reply: {k: v for k, v in reply.items() if k != "usage"})


def duplicate_key() -> Fault:
    """A normal reply with the top-level ``model`` key written twice."""
    return Fault(rewrite=lambda text: '{"model":"duplicate",' + text[1:])


def finish_reason(reason: str) -> Fault:
    """Chat only: a normal reply whose ``finish_reason`` is ``reason`` (e.g. ``"length"``)."""

    def change(reply: dict[str, Any]) -> dict[str, Any]:
        choice = {**reply["choices"][0], "finish_reason": reason}
        return {**reply, "choices": [choice]}

    return edit(change)


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server received it (header names lower-cased)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: str

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


_JSON = "application/json"


def _dumps(value: object) -> str:
    # allow_nan: fault edits deliberately put NaN/Infinity on the wire.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def _error(code: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=code)


_Shape = tuple[tuple[str, ...], bytes, object]


def _compact(body: str) -> dict[str, Any] | None:
    """``body`` parsed, when it is exactly its own compact JSON text (orjson's), else None.

    Being its own compact text rules out what strict reading refuses (duplicate keys, NaN,
    overflowing numbers) and any whitespace, so the body's length is the request's wire size.
    """
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(parsed) is not dict or orjson.dumps(parsed) != body.encode("utf-8"):
        return None
    return parsed


def _shape(parsed: dict[str, Any]) -> _Shape | None:
    """What a request's reply depends on besides its size: its keys, questions and model."""
    questions, model = parsed.get("questions"), parsed.get("model")
    if (
        parsed.get("state") is None
        or type(questions) is not dict
        or type(model) not in (str, type(None))
    ):
        return None
    return tuple(parsed), orjson.dumps(questions), model


class _KnownQuestions:
    """Replies to System One requests whose questions the server already validated and answered.

    Why: on a bench machine the stand-in's CPU is taken from the worker being measured, and a
    backfill's burst of requests queues a live request behind their reading. Validating and
    answering the same question set again (pydantic, strict JSON, the reply model) was ~3/4 of
    the server's own work per request (docs/concurrency.md, "Fifteenth round"). A request that
    is its own compact JSON and carries a known key list, question set and model is answered
    from the reply to the first such request, with its usage from its own length: the same
    reply, byte for byte, as validating it would give (tests/judges/test_judges_server.py).
    Anything else takes the full path. Bounded: a full table is cleared.
    """

    MAX = 256

    def __init__(self) -> None:
        self._replies: dict[_Shape, dict[str, Any]] = {}

    def reply(self, body: str) -> tuple[dict[str, Any] | None, _Shape | None]:
        """(the reply, None) when known; else (None, the shape to :meth:`learn`, if any)."""
        parsed = _compact(body)
        shape = None if parsed is None else _shape(parsed)
        known = None if shape is None else self._replies.get(shape)
        if known is None:
            return None, shape
        usage = synthetic_usage(utf16_units(body), len(known["answers"]))
        return {**known, "usage": usage.model_dump()}, None

    def learn(self, shape: _Shape, body: str, request: JudgeRequest, reply: dict[str, Any]) -> None:
        """Remember ``reply`` for ``shape`` when the body's length is the request's wire size."""
        if utf16_units(body) != wire_units(request):
            return
        if len(self._replies) >= self.MAX:
            self._replies.clear()
        self._replies[shape] = reply


class JudgeServer:
    """The aiohttp application, its script and its request log (thread-safe)."""

    def __init__(
        self,
        *,
        latency_ms: float = 0.0,
        api_key: str | None = None,
        p_yes: float = 0.95,
        record: bool = True,
    ) -> None:
        self.latency_ms = latency_ms
        self._api_key = api_key
        self._p_yes = p_yes
        self._record = record
        self._lock = threading.Lock()
        self._script: deque[Fault] = deque()
        self._log: list[LoggedRequest] = []
        self._count = 0
        self._in_flight = 0
        self._peak_in_flight = 0
        self._runner: web.AppRunner | None = None
        self._known = _KnownQuestions()
        self._released: asyncio.Event | None = None
        self.base_url = ""

    # --- what tests use ------------------------------------------------------------------------

    def script(self, *faults: Fault) -> None:
        """Queue faults for the next requests, one per request, in order."""
        with self._lock:
            self._script.extend(faults)

    @property
    def requests(self) -> tuple[LoggedRequest, ...]:
        """Every request received so far (when recording)."""
        with self._lock:
            return tuple(self._log)

    @property
    def count(self) -> int:
        """How many requests arrived (authorized or not)."""
        with self._lock:
            return self._count

    @property
    def peak_in_flight(self) -> int:
        """The most requests this server was handling at the same time."""
        with self._lock:
            return self._peak_in_flight

    def _next_fault(self) -> Fault:
        with self._lock:
            return self._script.popleft() if self._script else _NORMAL

    # --- serving -------------------------------------------------------------------------------

    def application(self) -> web.Application:
        """The aiohttp app: POST ``…/v1/systemone`` and ``…/chat/completions``."""
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/{tail:.*}", self._handle)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0 = any free port) in the running loop; returns the base URL."""
        self._released = asyncio.Event()
        runner = web.AppRunner(self.application(), access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runner = runner
        bound = runner.addresses[0][1]
        self.base_url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{bound}"  # noqa: S104
        return self.base_url

    async def stop(self) -> None:
        """Release stalled requests (they get 503) and stop serving."""
        if self._released is not None:
            self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
        try:
            return await self._answer(request)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        arrived_s = asyncio.get_running_loop().time()
        try:
            body = (await request.read()).decode("utf-8", errors="replace")
        except ConnectionResetError:  # the client gave up mid-upload: nobody to answer
            return web.Response(status=499)
        self._remember(request, body)
        expected = None if self._api_key is None else f"Bearer {self._api_key}"
        if expected is not None and request.headers.get("Authorization") != expected:
            return _error(401, "invalid or missing API key")
        fault = self._next_fault()
        # The reply is built while the latency runs, as a real judge's work is part of its latency.
        reply = None if fault.stall or fault.drop else self._reply_to(request.path, body, fault)
        if not await self._wait(fault, arrived_s):
            return _error(503, "server stopping")
        if reply is None:  # a drop: the connection is closed instead of answered
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=499)  # never written: the connection is gone
        return reply

    def _reply_to(self, path: str, body: str, fault: Fault) -> web.Response:
        if fault.status != 200 or fault.body is not None:
            return self._fault_reply(fault)
        return self._route(path, body, fault)

    def _route(self, path: str, body: str, fault: Fault) -> web.Response:
        if path.endswith("/v1/systemone"):
            return self._systemone(body, fault)
        if path.endswith("/chat/completions"):
            return self._chat(body, fault)
        return _error(404, "no such endpoint")

    def _remember(self, request: web.Request, body: str) -> None:
        if not self._record:  # benches: copying every request's headers cost more than counting
            with self._lock:
                self._count += 1
            return
        headers = MappingProxyType({k.lower(): v for k, v in request.headers.items()})
        entry = LoggedRequest(request.method, request.path, headers, body)
        with self._lock:
            self._count += 1
            self._log.append(entry)

    async def _wait(self, fault: Fault, arrived_s: float) -> bool:
        """Sleep until the latency after ``arrived_s`` (loop time) has passed, or stall; False
        when a stall was released by :meth:`stop`."""
        if fault.stall:
            assert self._released is not None  # set by start()
            await self._released.wait()
            return False
        delay_ms = self.latency_ms if fault.delay_ms is None else fault.delay_ms
        remaining_s = arrived_s + delay_ms / 1000 - asyncio.get_running_loop().time()
        if remaining_s > 0:  # (never with no latency: the arrival is in the past)
            await asyncio.sleep(remaining_s)
        return True

    @staticmethod
    def _fault_reply(fault: Fault) -> web.Response:
        body = fault.body
        if body is None:
            body = _dumps({"error": {"message": f"synthetic HTTP {fault.status}"}})
        if isinstance(body, str):
            body = body.encode("utf-8")
        headers = {"Content-Type": "application/json", **fault.headers}
        return web.Response(status=fault.status, body=body, headers=headers)

    @staticmethod
    def _reply(obj: object, fault: Fault) -> web.Response:
        if fault.edit is None and fault.rewrite is None:
            # A normal reply holds no NaN: orjson writes it in ~7 µs against json's ~40 (measured
            # on a base-trace reply); the stand-in's CPU is taken from the workers a bench measures.
            body = orjson.dumps(obj)
            return web.Response(body=body, headers=dict(fault.headers), content_type=_JSON)
        if fault.edit is not None:
            obj = fault.edit(obj)  # type: ignore[arg-type]  # replies are always objects
        text = _dumps(obj)
        if fault.rewrite is not None:
            text = fault.rewrite(text)
        return web.Response(text=text, headers=dict(fault.headers), content_type=_JSON)

    def _systemone(self, body: str, fault: Fault) -> web.Response:
        # An edit may change the reply in place: such a reply is neither taken nor kept.
        known, shape = self._known.reply(body) if fault.edit is None else (None, None)
        if known is not None:
            return self._reply(known, fault)
        try:
            request = JudgeRequest.model_validate(strict_loads(body))
        except ValueError:
            detail = [{"loc": ["body"], "msg": "invalid System One request", "type": "value_error"}]
            return web.json_response({"detail": detail}, status=422)
        reply = synthetic_response(request, self._p_yes).wire()
        if shape is not None:
            self._known.learn(shape, body, request, reply)
        return self._reply(reply, fault)

    def _chat(self, body: str, fault: Fault) -> web.Response:
        try:
            outer = strict_loads(body)
            inner = strict_loads(outer["messages"][-1]["content"])
            request = JudgeRequest.model_validate(
                {"state": inner["state"], "questions": inner["questions"]}
            )
        except (ValueError, KeyError, IndexError, TypeError):
            return _error(400, "invalid chat request")
        return self._reply(self._chat_reply(request, fault), fault)

    def _chat_reply(self, request: JudgeRequest, fault: Fault) -> object:
        response = synthetic_response(request, self._p_yes)
        content: object = {qid: _chat_value(a) for qid, a in response.answers.items()}
        if fault.edit_content is not None:
            content = fault.edit_content(content)  # type: ignore[arg-type]
        text = fault.content if fault.content is not None else _dumps(content)
        usage = response.usage
        assert usage is not None  # synthetic responses carry usage
        return {
            "id": "chatcmpl-synthetic",
            "object": "chat.completion",
            "created": 0,
            "model": SYNTHETIC_MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
            },
        }


def _chat_value(answer: object) -> object:
    """What a well-behaved LLM would write for one answer (docs/semantics.md §7.5 content shape)."""
    if isinstance(answer, NoulAnswer):
        return answer.noul
    if isinstance(answer, ChoiceAnswer | ScoreAnswer):
        return dict(answer.probabilities)
    raise TypeError(type(answer).__name__)


# --- running it ---------------------------------------------------------------------------------


@contextlib.contextmanager
def serve_in_thread(
    *,
    latency_ms: float = 0.0,
    api_key: str | None = None,
    p_yes: float = 0.95,
    record: bool = True,
) -> Iterator[JudgeServer]:
    """Run a :class:`JudgeServer` on 127.0.0.1 in a background thread; yields it (``.base_url``)."""
    server = JudgeServer(latency_ms=latency_ms, api_key=api_key, p_yes=p_yes, record=record)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="judge-server", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        yield server
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _serve_forever(server: JudgeServer, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    base_url = await server.start(host, port)
    sys.stdout.write(f"listening on {base_url}\n")
    sys.stdout.flush()
    await stop.wait()
    await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m worker.judges.testing [--host H] [--port N] [--latency-ms M] ...``."""
    parser = argparse.ArgumentParser(description="Synthetic System One / Chat Completions server")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (0 = any free port)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed reply latency")
    parser.add_argument("--p-yes", type=float, default=0.95, help="noul answer (default 0.95)")
    parser.add_argument(
        "--api-key-env", default=None, help="name of an env var holding the required API key"
    )
    args = parser.parse_args(argv)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not api_key:
        parser.error(f"--api-key-env: {args.api_key_env} is not set")
    server = JudgeServer(
        latency_ms=args.latency_ms, api_key=api_key, p_yes=args.p_yes, record=False
    )
    asyncio.run(_serve_forever(server, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
