"""The "order 42" example: a realistic, complete one-call agent trace (OpenAI chat format).

The user asks where order 42 is, the assistant calls ``lookup_order({"order_id": 42})``, the tool
answers "Order 42 shipped yesterday." and the assistant repeats it. The catalog is given and the
gold trajectory is ``["lookup_order"]``, so all seven agent metrics and ``trajectory_match`` apply.
Builders return fresh objects on every call, so tests may mutate them freely.
"""

from __future__ import annotations

from typing import Any

from worker.evaluation import Trace

__all__ = [
    "ANSWER",
    "CALL_ID",
    "REQUEST",
    "TOOL_RESULT",
    "order42_messages",
    "order42_tools",
    "order42_trace",
]

REQUEST = "Where is my order 42?"
CALL_ID = "call_lookup_42"
TOOL_RESULT = "Order 42 shipped yesterday."
ANSWER = "Order 42 shipped yesterday."


def order42_messages() -> list[dict[str, Any]]:
    """System prompt, user request, one tool call, its result and the final answer."""
    return [
        {"role": "system", "content": "You are the support assistant of an online shop."},
        {"role": "user", "content": REQUEST},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": CALL_ID,
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": 42}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": CALL_ID, "content": TOOL_RESULT},
        {"role": "assistant", "content": ANSWER},
    ]


def order42_tools() -> list[dict[str, Any]]:
    """The catalog offered to the model (OpenAI style)."""
    return [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Look up the shipping status of an order by its id.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "integer"}},
                    "required": ["order_id"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "cancel_order",
                "description": "Cancel an order that has not shipped yet.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "integer"}},
                    "required": ["order_id"],
                },
            },
        },
    ]


def order42_trace(trace_id: str = "order-42") -> Trace:
    """The complete order-42 trace, with ``expected_tool_calls = ["lookup_order"]``."""
    trace = Trace.from_messages(trace_id, order42_messages(), order42_tools())
    return trace.with_field("expected_tool_calls", ["lookup_order"])
