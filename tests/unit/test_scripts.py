"""Which texts reach the model: Chinese yes, Japanese and Korean no (a 422 at the edge), the rest copied."""

from __future__ import annotations

import pytest

from handlers.errors import UnsupportedLanguage
from handlers.text.scripts import check_language, has_han
from handlers.wire.errors import client_error


@pytest.mark.parametrize(
    "text",
    [
        "我喜欢吃寿司。",
        "这家店叫做の家。",
        "他说了一句 ありがとう 然后就走了，我们都没有听懂他的意思。",
        "東京是日本的首都。",
    ],
)
def test_chinese_passes(text: str) -> None:
    check_language(text, "text")


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("私は寿司を食べるのが好きです。", "Japanese"),
        ("ありがとう", "Japanese"),
        ("안녕하세요, 만나서 반갑습니다.", "Korean"),
    ],
)
def test_japanese_and_korean_are_refused_by_name(text: str, language: str) -> None:
    with pytest.raises(UnsupportedLanguage) as raised:
        check_language(text, "text 2")
    assert client_error(raised.value).status == 422
    assert raised.value.message.startswith(f"text 2 looks like {language}")
    assert "translates Chinese only" in raised.value.message


def test_han_detection() -> None:
    assert has_han("abc 中 def")
    assert not has_han("Hello, world! 123 https://example.com ありがとう")
