"""Trace records for the tool-call tests (fields format, read by the real reader)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "CANCEL",
    "FIRST_RESULT",
    "LOOKUP",
    "ORDER_SCHEMA",
    "SECOND_RESULT",
    "bad_calls_record",
    "orders_record",
]

FIRST_RESULT = "processing RESULT-ONE-5c1e"
SECOND_RESULT = "cancel failed RESULT-TWO-9b7d"
ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}
LOOKUP = {"name": "lookup_order", "description": "Look up an order.", "parameters": ORDER_SCHEMA}
CANCEL = {"name": "cancel_order", "description": "Cancel an order.", "parameters": ORDER_SCHEMA}


def orders_record() -> dict[str, Any]:
    """Look up order 42 (ok), then cancel it (error); cancel_order is offered only in round 2."""
    messages = [
        {"role": "USER", "text": "Cancel order 42 if it has not shipped."},
        {"role": "ASSISTANT", "text": ""},
        {"role": "ASSISTANT", "text": ""},
        {"role": "ASSISTANT", "text": "I could not cancel order 42."},
    ]
    calls = [
        {"id": "c1", "name": "lookup_order", "arguments": {"order_id": "42"}, "message_index": 1,
         "result": FIRST_RESULT, "result_state": "SUCCESS"},
        {"id": "c2", "name": "cancel_order", "arguments": {"order_id": "42"}, "message_index": 2,
         "result": SECOND_RESULT, "result_state": "ERROR"},
    ]  # fmt: skip
    rounds = [
        {"after_message_count": 1, "tools": [LOOKUP]},
        {"after_message_count": 2, "tools": [LOOKUP, CANCEL]},
    ]
    fields = {
        "available_tools": [LOOKUP],
        "available_tool_snapshots": rounds,
        "messages": messages,
        "tool_calls": calls,
    }
    return {"id": "orders", "fields": fields}


def bad_calls_record() -> dict[str, Any]:
    """A call to a tool never offered, then a lookup whose arguments break the schema."""
    messages = [
        {"role": "USER", "text": "Refund order 7."},
        {"role": "ASSISTANT", "text": ""},
        {"role": "ASSISTANT", "text": ""},
        {"role": "ASSISTANT", "text": "Order 7 was not found."},
    ]
    calls = [
        {"id": "b1", "name": "refund_order", "arguments": {"order_id": "7"}, "message_index": 1,
         "result": "no such tool", "result_state": "ERROR"},
        {"id": "b2", "name": "lookup_order", "arguments": {"order": 7}, "message_index": 2,
         "result": "not found", "result_state": "SUCCESS"},
    ]  # fmt: skip
    fields = {"available_tools": [LOOKUP], "messages": messages, "tool_calls": calls}
    return {"id": "bad-calls", "fields": fields}
