"""The CLI's consoles print stored text as it is stored."""

from __future__ import annotations

from worker.cli._app import err, out


def test_emoji_codes_in_stored_text_are_printed_as_they_are() -> None:
    """A trace id or question text holding ``:x:`` is printed as ``:x:``, not as an emoji."""
    for console in (out, err):
        with console.capture() as captured:
            console.print("trace order:x:42 reason :warning:", markup=False, highlight=False)
        assert captured.get() == "trace order:x:42 reason :warning:\n"
