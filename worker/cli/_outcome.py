"""``evalq outcome``: send outcome events (late facts) on the outcomes lane."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from typer.models import OptionInfo

from producer.snapshot import OutcomeEvent

from ._app import out
from ._common import (
    SHOWN_REJECTIONS,
    connected,
    invalid,
    loads_strict,
    print_rejections,
    require_broker,
    say_empty,
    settings,
)

__all__ = ["EPILOG", "outcome"]

EPILOG = (
    "A bad line is reported as file:line: field: CODE and the rest is still sent. "
    "Exit status: 1 when any line was rejected, 2 for invalid flags."
)
"""The ``--help`` epilog: exit statuses."""


def _event(flag: str, text: str) -> OptionInfo:
    """An event flag, with its twin ``EVALQ_OUTCOME_<FLAG>``."""
    variable = "EVALQ_OUTCOME_" + flag.removeprefix("--").upper().replace("-", "_")
    option: OptionInfo = typer.Option(flag, envvar=variable, help=text)
    return option


@dataclass(frozen=True)
class _EventFlags:
    """The flags that describe one event (None: not given)."""

    event_id: str | None
    trace_id: str | None
    name: str | None
    value: str
    observed_at: str | None
    session_id: str | None
    unit_event_id: str | None

    def given(self) -> bool:
        """True when any flag naming the event was given (``--value`` has a default)."""
        named = (self.event_id, self.trace_id, self.name, self.observed_at)
        return any(v is not None for v in (*named, self.session_id, self.unit_event_id))


def outcome(
    file: Annotated[
        Path | None,
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            envvar="EVALQ_OUTCOME_FILE",
            help="JSONL of outcome events (else one event from the flags)",
        ),
    ] = None,
    *,
    event_id: Annotated[str | None, _event("--event-id", "Unique id of the event")] = None,
    trace_id: Annotated[str | None, _event("--trace-id", "Trace the fact is about")] = None,
    name: Annotated[str | None, _event("--name", "Outcome name, e.g. refund_reversed")] = None,
    value: Annotated[str, _event("--value", "JSON value (default null)")] = "null",
    observed_at: Annotated[str | None, _event("--observed-at", "ISO time (default now)")] = None,
    session_id: Annotated[str | None, _event("--session-id", "Session it belongs to")] = None,
    unit_event_id: Annotated[
        str | None, _event("--unit-event-id", "Event of the trace it is about")
    ] = None,
) -> None:
    """Send outcome events on the outcomes lane: every line of FILE, or one from the flags."""
    from producer import send_outcomes  # noqa: PLC0415 - fast --help

    flags = _EventFlags(event_id, trace_id, name, value, observed_at, session_id, unit_event_id)
    if file is not None and flags.given():
        invalid("give FILE or the event flags (--event-id …), not both")
    config = settings()
    single = None if file else _flag_event(flags)
    with connected(config, require_broker(config)) as producer:
        if single is not None:
            producer.outcome(single)
            out.print("sent 1 outcome event")
            return
        assert file is not None
        summary = send_outcomes(file, producer.outcome, keep=SHOWN_REJECTIONS)
    out.print(f"sent {summary.sent} outcome event(s); rejected lines: {summary.rejected}")
    print_rejections(summary.rejected_examples, summary.rejected)
    if summary.sent == 0 and summary.rejected == 0:
        say_empty(str(file), "outcome events", "send")
    if summary.rejected:
        raise typer.Exit(1)


def _flag_event(flags: _EventFlags) -> OutcomeEvent:
    from producer import outcome_problem  # noqa: PLC0415 - fast --help

    event = _parse_flag_event(flags)
    problem = outcome_problem(event)
    if problem is not None:
        invalid(f"invalid outcome event: --value: {problem[0]}: {problem[1]}")
    return event


def _parse_flag_event(flags: _EventFlags) -> OutcomeEvent:
    try:
        return OutcomeEvent(
            event_id=flags.event_id or "",
            trace_id=flags.trace_id or "",
            name=flags.name or "",
            value=loads_strict(flags.value),
            observed_at=flags.observed_at or datetime.now(UTC),
            session_id=flags.session_id,
            unit_event_id=flags.unit_event_id,
        )
    except (ValidationError, ValueError, RecursionError) as exc:
        fields = sorted(
            {str(e["loc"][0]) for e in exc.errors()}
            if isinstance(exc, ValidationError)
            else {"value"}
        )
        flags_named = ", --".join(f.replace("_", "-") for f in fields)
        invalid(f"invalid outcome event: check --{flags_named}")
