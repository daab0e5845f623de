"""Requests, canned chat replies and a recording transport shared by the judge tests."""

from __future__ import annotations

import json
import traceback
from typing import Any

from worker.judges import (
    ChoiceQuestion,
    JudgeRequest,
    NoulQuestion,
    ScoreQuestion,
)

__all__ = [
    "CANARY_KEY",
    "MIXED",
    "NOUL",
    "Recorder",
    "chat_reply",
    "leaks",
]

CANARY_KEY = "sk-CANARY-9d2f7e-NEVER-PRINT"
"""An API key planted to prove it never appears in an exception or a repr."""

NOUL = JudgeRequest(state={"answer": "Paris"}, questions={"m.q": NoulQuestion(instructions="ok?")})

MIXED = JudgeRequest(
    state={"request": "Where is order 42?", "tool_results": [{"status": "shipped"}]},
    questions={
        "grounded.c0": NoulQuestion(instructions="Supported?", criteria={"true": "yes"}),
        "answer_relevancy.noncommittal": NoulQuestion(instructions="Evasive?"),
        "tool_choice.q": ChoiceQuestion(
            instructions="Right tool?", criteria={"wrong": None, "correct": "the lookup tool"}
        ),
        "completeness.q": ScoreQuestion(
            instructions="Complete?", criteria=["none", {"level": "partial"}, "all"]
        ),
    },
)


def chat_reply(
    content: object,
    *,
    model: object = "gpt-test",
    usage: Any = (11, 7),
    finish_reason: object = "stop",
) -> str:
    """A Chat Completions reply; ``content`` (if not a str) is JSON-encoded; usage=None drops it."""
    text = content if isinstance(content, str) else json.dumps(content)
    reply: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
    }
    if usage is not None:
        reply["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
    return json.dumps(reply)


class Recorder:
    """A Chat transport (the judge's injected seam) returning a fixed reply and keeping bodies."""

    def __init__(self, reply: object) -> None:
        self.reply = reply
        self.bodies: list[str] = []

    async def __call__(self, request_json: str) -> Any:
        self.bodies.append(request_json)
        return self.reply

    def sent(self) -> dict[str, Any]:
        """The last outgoing body, parsed."""
        body: dict[str, Any] = json.loads(self.bodies[-1])
        return body


def leaks(secret: str, *objects: object) -> bool:
    """Whether ``secret`` shows in the str, repr or formatted traceback of any object."""
    for obj in objects:
        texts = [str(obj), repr(obj)]
        if isinstance(obj, BaseException):
            texts.append("".join(traceback.format_exception(obj)))
        if any(secret in text for text in texts):
            return True
    return False
