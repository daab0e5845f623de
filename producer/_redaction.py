"""Producer-side redaction: a hook applied to every event before a snapshot leaves the process.

A :class:`Redactor` is any callable ``Event -> Event`` (optionally with a ``name`` attribute). It
runs in the producer, before the snapshot's content hash is taken and before anything is queued,
so redacted text never reaches the broker, the store or a judge. The snapshot records the hook's
name in ``Snapshot.redaction`` so a report can tell redacted evidence from raw evidence (a judge
scoring "[REDACTED]" may reasonably be less sure).

Why the invariants: a hook may rewrite *content* (text, arguments, status) but not the *structure*
(id, type, call id, parent id, tool name, timestamp): the evidence window, tool pairing and
causal order are built on those, and a hook that changed them would silently corrupt the trace.
Such a hook raises :class:`RedactionError` (code ``REDACTION_INVALID``) and the caller drops the
snapshot: failing closed, because sending unredacted text is worse than losing one evaluation.

Scope: events only (messages, tool arguments and results). Tool catalogs are application code,
and ``contexts``/``claims`` come from the importer's fields format, where the caller controls them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from worker.canonical_json import thaw

from ._sampling import replace_fields
from .snapshot import Event, Snapshot

__all__ = [
    "REDACTED",
    "RedactionError",
    "Redactor",
    "RegexRedactor",
    "apply_redaction",
    "redact_events",
    "redactor_name",
]

REDACTED = "[REDACTED]"
_STRUCTURE = ("id", "type", "call_id", "parent_id", "tool_name", "timestamp")


class RedactionError(ValueError):
    """The hook failed or changed an event's structure (reason code ``REDACTION_INVALID``)."""

    code = "REDACTION_INVALID"


@runtime_checkable
class Redactor(Protocol):
    """A hook ``Event -> Event`` that rewrites content only. ``name`` is optional."""

    def __call__(self, event: Event, /) -> Event: ...


def redactor_name(hook: Redactor) -> str:
    """The name recorded in ``Snapshot.redaction``: ``hook.name``, else its function/class name."""
    name = getattr(hook, "name", None)
    if isinstance(name, str) and name:
        return name
    return str(getattr(hook, "__qualname__", type(hook).__qualname__))


def _checked(before: Event, after: object) -> Event:
    if not isinstance(after, Event):
        raise RedactionError("redactor must return an Event")
    if any(getattr(before, f) != getattr(after, f) for f in _STRUCTURE):
        raise RedactionError("redactor changed an event's structure")
    return after


def redact_events(events: Iterable[Event], hook: Redactor) -> tuple[Event, ...]:
    """Apply ``hook`` to each event, checking it left the structure alone."""
    return tuple(_checked(event, hook(event)) for event in events)


def apply_redaction(snapshot: Snapshot, hook: Redactor | None) -> Snapshot:
    """The snapshot with redacted events and the hook's name recorded (a chain reads ``a+b``).

    Any error inside the hook becomes :class:`RedactionError`, never its text (it may quote the
    very content being redacted).
    """
    if hook is None:
        return snapshot
    try:
        events = redact_events(snapshot.events, hook)
    except RedactionError:
        raise
    except Exception:  # noqa: BLE001 - any hook failure must fail closed, as one code
        raise RedactionError("redactor raised") from None
    name = redactor_name(hook)
    recorded = f"{snapshot.redaction}+{name}" if snapshot.redaction else name
    return replace_fields(snapshot, events=events, redaction=recorded)


class RegexRedactor:
    """Replace every match of ``patterns`` in event text and in string leaves of tool arguments.

    >>> hook = RegexRedactor("pii-email", [r"[\\w.+-]+@[\\w-]+\\.[\\w.]+"])
    """

    def __init__(self, name: str, patterns: Iterable[str], replacement: str = REDACTED) -> None:
        self.name = name
        self.replacement = replacement
        self._pattern = re.compile("|".join(f"(?:{p})" for p in patterns))

    def _text(self, value: str | None) -> str | None:
        return None if value is None else self._pattern.sub(self.replacement, value)

    def _json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return {self._text(k): self._json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._json(v) for v in value]
        return value

    def __call__(self, event: Event, /) -> Event:
        """The event with matches replaced in ``text`` and ``arguments``."""
        fields = {name: getattr(event, name) for name in Event.model_fields}
        fields["text"] = self._text(event.text)
        fields["arguments"] = self._json(thaw(event.arguments))
        return Event.model_validate(fields)
