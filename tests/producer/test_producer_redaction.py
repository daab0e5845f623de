"""Redaction hook: redacted text never reaches the snapshot, the hook's name is recorded."""

from __future__ import annotations

import json

import pytest

from producer._redaction import RedactionError, RegexRedactor, apply_redaction
from producer.snapshot import Event, Snapshot
from tests.producer.producer_kit import make_snapshot

EMAIL = r"[\w.+-]+@[\w-]+\.[\w.]+"


def test_redacted_text_never_reaches_the_snapshot_and_the_name_is_recorded() -> None:
    """Emails in messages and tool arguments are gone from the wire; redaction names the hook."""
    original = make_snapshot("t1", text="mail bob@example.com now", tool="lookup")
    redacted = apply_redaction(original, RegexRedactor("pii-email", [EMAIL]))
    wire = json.dumps(redacted.wire())
    assert "bob@example.com" in json.dumps(original.wire())
    assert "bob@example.com" not in wire
    assert "[REDACTED]" in wire
    assert redacted.redaction == "pii-email"
    assert redacted.snapshot_id != original.snapshot_id
    assert Snapshot.model_validate(redacted.wire()).snapshot_id == redacted.snapshot_id
    assert [e.id for e in redacted.events] == [e.id for e in original.events]


def test_a_plain_function_hook_is_named_by_its_qualname_and_chains() -> None:
    """A bare function works as a hook; a second hook is recorded after the first (a+b)."""

    def drop_text(event: Event) -> Event:
        return Event.model_validate({**dict(event), "text": None})

    once = apply_redaction(make_snapshot("t1"), RegexRedactor("emails", [EMAIL]))
    twice = apply_redaction(once, drop_text)
    assert twice.redaction == "emails+" + drop_text.__qualname__
    assert all(e.text is None for e in twice.events)


def test_a_hook_that_changes_structure_or_fails_is_refused_without_its_text() -> None:
    """Changing ids/types or raising gives RedactionError(REDACTION_INVALID) with no content."""

    def renumber(event: Event) -> Event:
        return Event.model_validate({**dict(event), "id": event.id + "x"})

    def explode(event: Event) -> Event:
        raise RuntimeError(f"cannot handle {event.text}")

    snapshot = make_snapshot("t1", text="secret-123")
    with pytest.raises(RedactionError) as bad:
        apply_redaction(snapshot, renumber)
    assert bad.value.code == "REDACTION_INVALID"
    with pytest.raises(RedactionError) as failed:
        apply_redaction(snapshot, explode)
    assert "secret-123" not in str(failed.value)
    assert failed.value.__cause__ is None


def test_no_hook_leaves_the_snapshot_untouched() -> None:
    """Without a hook the snapshot (and its id) are unchanged and redaction stays None."""
    snapshot = make_snapshot("t1")
    assert apply_redaction(snapshot, None) is snapshot
    assert snapshot.redaction is None
