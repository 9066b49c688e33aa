"""Placeholders, HTML and reassembly, with fake models that echo, rewrite or drop tokens."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.text.documents import plan_document
from handlers.text.markup import html_segments
from handlers.text.protection import mask, protect, restore
from tests.examples import examples


def echo(inputs: list[str]) -> list[str]:
    return list(inputs)


def drop_tokens(inputs: list[str]) -> list[str]:
    """A model that loses every placeholder token."""
    return [re.sub(r"ZX\d+", "", text) for text in inputs]


def english(inputs: list[str]) -> list[str]:
    """A model that keeps the tokens (spaced and lower-cased, as a real model may) and translates the rest."""
    return [
        " ".join(f"zx {t[2:]}" if t.startswith("ZX") else "word" for t in re.findall(r"ZX\d+|.", s))
        for s in inputs
    ]


PROTECTED_TEXTS = {
    "url": "请访问 https://example.com/a/b.html?x=1&y=2 了解更多。",
    "url glued to Chinese": "访问https://example.com了解更多。",
    "email": "联系 support@example.org 获取帮助。",
    "brace": "你好{name}，欢迎回来。",
    "template": "你好{{user.name}}，欢迎回来。",
    "printf": "你有%d条新消息，来自%s。",
    "positional printf": "文件%1$s已保存到%2$s。",
    "index": "第{0}页，共{1}页。",
    "inline tag": "这是<b>重要</b>的事情。",
    "token look-alike": "型号ZX1不是占位符{x}。",
}


@pytest.mark.parametrize("text", PROTECTED_TEXTS.values(), ids=PROTECTED_TEXTS.keys())
def test_protected_spans_survive_a_model_that_copies_them(text: str) -> None:
    document = plan_document(text)
    spans = re.findall(
        r"https?://\S+?(?= |了)|\S+@\S+?(?= )|\{\{[^}]*\}\}|\{\w*\}|%\d\$s|%[ds]|</?b>|ZX1", text
    )
    assert spans, "the case names at least one protected span"
    # (A literal "ZX1" in the text is itself protected and reaches the model as a token.)
    assert not any(span in "".join(document.model_inputs) for span in spans if span != "ZX1")
    rendered = document.render(english(document.model_inputs))
    for span in spans:
        assert rendered.text.count(span) == text.count(span), span
    assert rendered.dropped == []


@pytest.mark.parametrize("text", PROTECTED_TEXTS.values(), ids=PROTECTED_TEXTS.keys())
def test_a_dropped_placeholder_is_appended_and_reported(text: str) -> None:
    document = plan_document(text)
    rendered = document.render(drop_tokens(document.model_inputs))
    for span in rendered.dropped:
        assert span in rendered.text
    inner = [span for sentence in document.sentences() for span in sentence.masked.spans]
    assert sorted(rendered.dropped) == sorted(inner)


def test_spans_at_the_edges_never_reach_the_model() -> None:
    document = plan_document("<b>你好</b>\nhttps://example.com 你好 {0}")
    assert document.model_inputs == ["你好", "你好"]
    assert document.render(["Hello", "Hi"]).text == "<b>Hello</b>\nhttps://example.com Hi {0}"


def test_text_without_chinese_is_not_translated() -> None:
    document = plan_document("Hello, world. Visit https://example.com!\n123")
    assert document.model_inputs == []
    assert not document.translated
    assert document.render([]).text == "Hello, world. Visit https://example.com!\n123"


def test_restore_ignores_tokens_it_did_not_issue_and_drops_duplicates() -> None:
    protected = protect("你好{a}世界")
    masked = mask(protected.text, protected)
    assert masked.core == "你好ZX1世界"
    assert restore(masked, "Hello ZX1 and ZX1 world ZX2").text == "Hello {a} and  world ZX2"


HTML = (
    "<!DOCTYPE html>\n<div class=\"x\" title='a>b！'>\r\n<p>你好，<b>世界</b>！&nbsp;访问 "
    '<a href="https://x.cn/?a=1&amp;b=2">这里</a>。</p><!-- 注释。 -->\n<pre>不翻译。</pre>'
    '<span translate="no">也不<b>翻</b></span>译<br/>第二行。<script>var a="<p>中文</p>";</script>'
    "<img alt='图片' src=a.png><p class=notranslate>保留。</p></div>"
)


def test_html_keeps_every_tag_attribute_comment_and_verbatim_element() -> None:
    document = plan_document(HTML, "html")
    assert document.model_inputs == ["你好，ZX1世界ZX2！", "访问 ZX1这里ZX2。", "译", "第二行。"]
    rendered = document.render(["<Hello> & ZX1world ZX2!", "see ZX1here ZX2.", "tr", "Line two."])
    assert rendered.text == HTML.replace(
        '你好，<b>世界</b>！&nbsp;访问 <a href="https://x.cn/?a=1&amp;b=2">这里</a>。',
        '&lt;Hello&gt; &amp; <b>world </b>! &nbsp;see <a href="https://x.cn/?a=1&amp;b=2">here </a>.',
    ).replace("</span>译<br/>第二行。", "</span>tr<br/>Line two.")


def test_html_echo_gives_back_the_input() -> None:
    document = plan_document(HTML, "html")
    # The only change: a space where a translated sentence meets the next with no gap.
    assert document.render(echo(document.model_inputs)).text == HTML.replace("！&nbsp;", "！ &nbsp;")


def test_html_source_wrapped_over_lines_is_one_sentence_per_sentence() -> None:
    wrapped = "<p>\n  今天天气很好，\n  我们去公园。\n  Hello\n  world 你好。\n</p>\n<p>第二段</p>"
    document = plan_document(wrapped, "html")
    # A browser shows these line breaks as nothing (between CJK) or a space: so does the model.
    assert document.model_inputs == ["今天天气很好，我们去公园。", "Hello world 你好。", "第二段"]
    rendered = document.render(["Nice weather, to the park.", "Hello world, hi.", "Part two"])
    assert rendered.text == "<p>\n  Nice weather, to the park.\n  Hello world, hi.\n</p>\n<p>Part two</p>"
    assert [pair.source for pair in rendered.pairs][:2] == [
        "今天天气很好，\n  我们去公园。",
        "Hello\n  world 你好。",
    ]
    # Plain text: every line break still ends a sentence, and stays where it was.
    assert plan_document("今天天气很好，\n我们去公园。").model_inputs == ["今天天气很好，", "我们去公园。"]


HTML_PARTS = st.sampled_from(
    [
        "<p>",
        "</p>",
        "<b>",
        "</b>",
        "<br>",
        "<a href='x?a=1&b=2'>",
        "</a>",
        "&amp;",
        "&#20320;",
        "<!-- c -->",
        "<script>x<y</script>",
        "你好",
        "世界。",
        "！",
        " ",
        "\n",
        "Hi.",
        "{name}",
        "https://a.cn/x",
        "<",
        "&",
        ">",
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(HTML_PARTS, max_size=25).map("".join))
def test_html_segments_cover_the_input_exactly(html: str) -> None:
    assert "".join(segment.raw for segment in html_segments(html)) == html
    document = plan_document(html, "html")
    untouched = document.render(document.model_inputs)
    # Echoed sentences come back escaped only where the model's text needed it; markup is exact.
    assert len(untouched.pairs) == sum(1 for _ in document.sentences())


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.sampled_from(list("你好。！ \n{}%sd$1<b>/:.@ZXhtps")), max_size=60))
def test_plain_text_round_trip_with_an_echo_model(text: str) -> None:
    document = plan_document(text)
    rendered = document.render(echo(document.model_inputs))
    assert rendered.dropped == []
    # The echo gives back every sentence; only the spaces put between translated sentences are new.
    assert rendered.text.replace(" ", "") == text.replace(" ", "")
