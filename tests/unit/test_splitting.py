"""The sentence splitter: hard cases, and the round trip that must hold for any text."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.splitter_cases import HARD_CASES
from handlers.text.splitting import join_sentences, sentences_of, split_text
from tests.examples import examples


@pytest.mark.parametrize(("text", "expected"), HARD_CASES)
def test_hard_cases(text: str, expected: list[str]) -> None:
    assert sentences_of(text) == expected


def test_lines_and_whitespace_are_kept_exactly() -> None:
    text = "  第一行。第二句！\n\n  第二段。 是的。  \r\n最后"
    pieces = split_text(text)
    assert [p.text for p in pieces if p.is_sentence] == ["第一行。", "第二句！", "第二段。", "是的。", "最后"]
    assert [p.text for p in pieces if not p.is_sentence] == ["  ", "\n\n  ", " ", "  \r\n"]
    joined = join_sentences(pieces, [(p.text.upper(), True) for p in pieces if p.is_sentence])
    # A space between translated sentences that had none; every gap as sent.
    assert joined == "  第一行。 第二句！\n\n  第二段。 是的。  \r\n最后"


def test_untranslated_neighbours_get_no_space() -> None:
    pieces = split_text("Hi.你好。")
    assert join_sentences(pieces, [("Hi.", False), ("你好。", False)]) == "Hi.你好。"
    assert join_sentences(pieces, [("Hi.", False), ("Hello.", True)]) == "Hi. Hello."


ALPHABET = st.sampled_from(list("你好世界。！？；…，、.!?; \n\r\t《》「」“”（）()\"'3.5abcXZ\u3000\u2028"))


@settings(max_examples=examples(400), deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=80) | st.text(max_size=60), st.booleans())
def test_split_then_join_gives_back_the_text(text: str, line_breaks: bool) -> None:
    pieces = split_text(text, line_breaks)
    assert "".join(p.text for p in pieces) == text
    assert join_sentences(pieces, [(p.text, False) for p in pieces if p.is_sentence]) == text
    # Gaps are whitespace only, sentences never start or end with whitespace, and no two gaps touch.
    for before, after in itertools.pairwise(pieces):
        assert before.is_sentence or after.is_sentence
    for piece in pieces:
        assert piece.text
        assert piece.text.strip() == piece.text if piece.is_sentence else not piece.text.strip()
