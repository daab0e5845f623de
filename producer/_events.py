"""The normalized trace events a snapshot carries, and the base of every contract model.

Importers build these (:mod:`producer.importers`), :class:`~producer.snapshot.Snapshot` holds
them, and the projection (:mod:`producer._projection`) turns them into the engine's messages:
a module of their own so that the projection needs nothing of the snapshot that calls it.
Re-exported by :mod:`producer.snapshot`, the contract's public face.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, field_validator

from worker.canonical_json import FrozenJson

__all__ = ["Contract", "Event", "EventType", "NonBlank", "ToolRound", "ToolSpec", "UtcTime"]


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


UtcTime = Annotated[AwareDatetime, AfterValidator(_utc)]


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must be non-blank")
    return value


NonBlank = Annotated[str, AfterValidator(_non_blank)]
"""A string with something besides whitespace in it (ids and names of the contract)."""


class Contract(BaseModel):
    """The base of every contract model: frozen, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """Plain JSON-mode dict (what goes on the queue)."""
        return self.model_dump(mode="json")


class EventType(StrEnum):
    """Normalized event kinds. Messages carry text; tool events carry call ids."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"


class Event(Contract):
    """One normalized trace event, in causal order.

    ``arguments`` of a tool call is the parsed JSON value, or the raw string when the exporter's
    text was not valid JSON (the projection then flags ``INVALID_TOOL_ARGUMENTS``). ``parent_id``
    of a tool call names the assistant event that proposed it. ``issues`` are importer codes
    (e.g. ``TRUNCATED_CONTENT``, ``UNSUPPORTED_TOOL_CONTENT``) that make the trace incomplete.
    """

    id: str
    type: EventType
    text: str | None = None
    tool_name: str | None = None
    arguments: FrozenJson = None
    call_id: str | None = None
    parent_id: str | None = None
    timestamp: UtcTime | None = None
    status: str | None = None
    issues: tuple[str, ...] = ()

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("event id must be non-blank")
        return value


class ToolSpec(Contract):
    """One tool offered to the model."""

    name: str
    description: str = ""
    parameters: FrozenJson = None


class ToolRound(Contract):
    """The catalog offered to the model call whose output starts at ``event_id``."""

    event_id: str
    tools: tuple[ToolSpec, ...]
