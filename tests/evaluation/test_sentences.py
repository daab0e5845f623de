"""Sentence splitting for ``grounded`` (docs/semantics.md §5.3): the JDK root-locale behaviour."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.evaluation import split_sentences
from worker.evaluation._sentences import _segments

CORPUS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "jdk17_sentences.json").read_text(encoding="utf-8")
)["cases"]

GOLDEN = [
    ("订单已发货。退款已经完成。", ("订单已发货。", "退款已经完成。")),
    ("好的\uff01谢谢\uff1f再见。", ("好的\uff01", "谢谢\uff1f", "再见。")),
    ("Order 42 shipped yesterday.", ("Order 42 shipped yesterday.",)),
    ("Hello!! Are you there?? yes.", ("Hello!!", "Are you there??", "yes.")),
    ("Price is 3.5 USD. ok", ("Price is 3.5 USD. ok",)),
    ("Shipped. 42 more arrive.", ("Shipped. 42 more arrive.",)),
    (
        "Dr. Smith arrived at 5 p.m. today. He left early.",
        ("Dr.", "Smith arrived at 5 p.m. today.", "He left early."),
    ),
    ("The U.S. Army left. Then.", ("The U.S.", "Army left.", "Then.")),
    ("(Shipped.) Then.", ("(Shipped.)", "Then.")),
    ("Done.\nNext line starts.", ("Done.", "Next line starts.")),
    ("line one\nline two", ("line one\nline two",)),
    ("Items:\n- first\n- second", ("Items:\n- first\n- second",)),
    ("no terminal punctuation", ("no terminal punctuation",)),
    ("   \n\t ", ()),
    ("", ()),
]


@pytest.mark.parametrize(("text", "claims"), GOLDEN, ids=[repr(t)[:30] for t, _ in GOLDEN])
def test_golden_table(text: str, claims: tuple[str, ...]) -> None:
    """Every row of the golden table splits exactly as measured on JDK 17."""
    assert split_sentences(text) == claims


@pytest.mark.parametrize("case", CORPUS, ids=[repr(c["text"])[:30] for c in CORPUS])
def test_boundaries_match_the_jdk_corpus(case: dict[str, Any]) -> None:
    """Raw boundaries equal JDK 17's BreakIterator output (corpus made by data/regen_*.py)."""
    assert list(_segments(case["text"])) == case["segments"]


def test_corpus_covers_the_golden_table() -> None:
    """The JDK corpus contains the golden rows, so the table itself was measured, not assumed."""
    texts = {case["text"] for case in CORPUS}
    assert {text for text, _ in GOLDEN} <= texts


def test_no_break_before_lowercase_after_period_but_after_question_mark() -> None:
    """'.' before a lowercase word does not break; '?' and '!' always do."""
    assert split_sentences("It is done. ok then") == ("It is done. ok then",)
    assert split_sentences("Is it done? ok then") == ("Is it done?", "ok then")
    assert split_sentences("Done! ok then") == ("Done!", "ok then")


def test_closing_quotes_and_brackets_attach_to_the_sentence() -> None:
    """Closing punctuation after the terminator stays with its sentence."""
    assert split_sentences('He said "stop!" Then left.') == ('He said "stop!"', "Then left.")
    assert split_sentences("It shipped (really.) Next.") == ("It shipped (really.)", "Next.")


def test_fullwidth_and_ideographic_terminators_break_without_spaces() -> None:
    """CJK terminators end a sentence even with no space after them."""
    assert split_sentences("退款完成。Thanks!") == ("退款完成。", "Thanks!")


def test_paragraph_separator_always_breaks() -> None:
    """U+2029 ends a sentence even without punctuation."""
    assert split_sentences("first part\u2029second part") == ("first part", "second part")


def test_blank_line_alone_does_not_break() -> None:
    """Newlines (even a blank line) do not break a sentence without punctuation."""
    assert split_sentences("Summary\n\nDetails follow") == ("Summary\n\nDetails follow",)


def test_rejects_non_string_input() -> None:
    """Only text can be split."""
    with pytest.raises(TypeError):
        split_sentences(None)  # type: ignore[arg-type]


_TEXT = st.text(
    alphabet=st.sampled_from(
        [*"aAzZ09 .!?,;:'\"()[]-\n\t", "。", "\uff01", "\u2029", "\u00a0", "\u0301", "订"]
    ),
    max_size=60,
)


@given(_TEXT)
def test_property_deterministic(text: str) -> None:
    """The same text always gives the same pieces."""
    assert split_sentences(text) == split_sentences(text)


@given(_TEXT)
def test_property_pieces_are_stripped_and_non_blank(text: str) -> None:
    """Every piece is stripped and non-blank."""
    for piece in split_sentences(text):
        assert piece
        assert piece == piece.strip()


@given(_TEXT)
def test_property_non_space_characters_preserved_in_order(text: str) -> None:
    """Concatenating the pieces keeps every non-space character of the text, in order."""

    def visible(value: str) -> str:
        return "".join(ch for ch in value if not ch.isspace())

    assert visible("".join(split_sentences(text))) == visible(text)


@given(_TEXT)
def test_property_raw_segments_partition_the_text(text: str) -> None:
    """The raw boundaries cover the whole text with non-empty, contiguous segments."""
    segments = _segments(text)
    assert "".join(segments) == text
    assert all(segments)


@given(st.text(max_size=40))
def test_property_any_unicode_text_is_handled(text: str) -> None:
    """Arbitrary Unicode (combining marks, controls, astral characters) never fails."""
    assert "".join(_segments(text)) == text
    assert all(piece and piece == piece.strip() for piece in split_sentences(text))
