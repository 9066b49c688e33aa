"""Cutting a translation back into its source's lines, putting the source's line breaks back, and
hostile text in the wrapped formats (srt, vtt, markdown): a round trip or a refusal, never a crash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.errors import Unparsable
from handlers.text.documents import plan_document
from handlers.text.wrapping import put_back, wrap
from handlers.wire.errors import client_error
from tests.examples import examples
from tests.unit.round_trip import english_words, untranslated


def test_a_translation_is_cut_at_the_spaces_nearest_even_lines() -> None:
    assert wrap("We are going to the park today.", 1) == "We are going to\nthe park today."
    assert wrap("one two three four five six", 2) == "one two\nthree four\nfive six"


def test_the_models_own_line_breaks_are_spaces() -> None:
    assert wrap("Hello\n\nworld", 0) == "Hello world"


def test_no_cut_splits_a_token_or_opens_a_line_with_markup() -> None:
    assert wrap("Go to ZX 1 now", 1) == "Go to\nZX 1 now"
    # A line opening with "- 5", "# " or a span that is "**" would be a dialogue line, a list item,
    # a heading or emphasis gone wrong.
    assert wrap("from - 5 to 10", 1) == "from -\n5 to 10"
    assert wrap("step 1 then # two", 1) == "step 1\nthen # two"
    assert wrap("a ZX1 bold ZX2", 1, ["**", "**"]) == "a ZX1\nbold ZX2"


def test_too_few_places_to_cut_give_fewer_lines_never_an_empty_one() -> None:
    assert wrap("OK", 2) == "OK"
    assert wrap("Yes, sir", 2) == "Yes,\nsir"
    assert wrap("你好世界", 1) == "你好\n世界"  # between Han characters, as a Chinese echo would be


def test_line_breaks_go_back_as_the_source_wrote_them() -> None:
    assert put_back("a\nb\nc", ["\r\n", "  \n> "]) == "a\r\nb  \n> c"
    assert put_back("a\nb", []) == "a b"


@settings(max_examples=examples(300), deadline=None)
@given(st.text(st.sampled_from(list("ab 你好-1.#ZX\n")), max_size=40), st.integers(0, 4))
def test_a_cut_replaces_spaces_by_line_breaks_and_nothing_else(translation: str, breaks: int) -> None:
    wrapped = wrap(translation, breaks)
    assert wrapped.count("\n") <= breaks
    flat = translation.replace("\n", " ")
    assert wrapped.replace("\n", "").replace(" ", "") == flat.replace(" ", "")
    if breaks and wrapped.count("\n"):
        assert all(line.strip() for line in wrapped.split("\n"))


def test_a_text_not_in_its_declared_format_is_a_client_error() -> None:
    error = client_error(Unparsable('not SRT: line 1: expected a cue, got "hello"'))
    assert error.status == 400 and "line 1" in error.message


MARKUP_SOUP = st.lists(
    st.sampled_from([*"#*_`~[]()<>!|-+=:.1 \t\n\r\\&;{}\"'你好。WEBVTT0", "-->", "```"]), max_size=60
).map("".join)


@settings(max_examples=examples(500), deadline=None)
@given(st.text(max_size=80) | MARKUP_SOUP, st.sampled_from(["srt", "vtt", "markdown"]))
def test_any_text_in_a_declared_format_round_trips_or_is_refused(text: str, text_format: str) -> None:
    try:
        document = plan_document(text, text_format)  # type: ignore[arg-type]
    except Unparsable:
        assert text_format != "markdown"  # any text is Markdown
        return
    assert untranslated(document) == text
    document.render(english_words(document.model_inputs))
