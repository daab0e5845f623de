"""A scripted OpenAI/Anthropic-compatible HTTP server on 127.0.0.1 for the observer tests.

Each POST to ``/v1/chat/completions`` or ``/v1/messages`` pops the next scripted reply of that
endpoint and records the request body, so tests drive the real SDK clients end to end.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeLLM",
    "anthropic_text",
    "anthropic_tool_use",
    "openai_text",
    "openai_tool_call",
    "running",
]


class FakeLLM:
    """Scripted replies per path and the request bodies received, in order."""

    def __init__(self) -> None:
        self.replies: dict[str, deque[dict[str, Any]]] = {
            "/v1/chat/completions": deque(),
            "/v1/messages": deque(),
        }
        self.requests: list[dict[str, Any]] = []
        self.url = ""


def _handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            fake.requests.append(json.loads(self.rfile.read(length)))
            queue = fake.replies.get(self.path)
            if not queue:
                self._send(404, {"error": {"message": "no scripted reply", "type": "test"}})
                return
            self._send(200, queue.popleft())

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            return

    return Handler


@contextmanager
def running() -> Iterator[FakeLLM]:
    """Serve a :class:`FakeLLM` on a free loopback port for the duration of the block."""
    fake = FakeLLM()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def openai_tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions response proposing one function call."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return _completion({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")


def openai_text(text: str) -> dict[str, Any]:
    """A Chat Completions response with a final text answer."""
    return _completion({"role": "assistant", "content": text}, "stop")


def _message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_tool_use(call_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages response with a text preamble and one tool_use block."""
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": call_id, "name": name, "input": tool_input},
    ]
    return _message(blocks, "tool_use")


def anthropic_text(text: str) -> dict[str, Any]:
    """An Anthropic Messages response with a final text answer."""
    return _message([{"type": "text", "text": text}], "end_turn")
