"""Documents on a real TorchServe: articles, HTML, non-Chinese input, the sentence cache's metric.

The tiny stand-in's output is noise, so these tests check structure, never wording: line
counts, protected spans, tags, the response's bookkeeping and the metrics port.
"""

from __future__ import annotations

import re

import pytest
import requests

from serving.torchserve import TorchServe
from tests.e2e.article_text import URLS, article
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def test_a_5000_character_article_comes_back_whole(server: TorchServe) -> None:
    text = article()
    assert 4500 < len(text) <= 5000
    response = server.client.translate(text)
    assert response.status_code == 200, response.text
    body = response.json()
    translation = body["translation"]
    assert translation.count("\n") == text.count("\n")
    assert [bool(line) for line in translation.split("\n")] == [bool(line) for line in text.split("\n")]
    for url in URLS:
        assert translation.count(url) == text.count(url), url
    assert body["stats"]["translated"] > 300 and body["stats"]["sentences"] >= body["stats"]["translated"]
    assert body["standin"] is True and "NOT a translation" in body["notice"]


def test_sentence_pairs_are_aligned_with_the_source(server: TorchServe) -> None:
    text = "第一句。第二句！\nHello there.\n第三句？"
    response = server.client.translate(text, sentences=True)
    assert response.status_code == 200, response.text
    pairs = response.json()["sentences"]
    assert [pair["source"] for pair in pairs] == ["第一句。", "第二句！", "Hello there.", "第三句？"]
    assert [pair["translated"] for pair in pairs] == [True, True, False, True]
    assert pairs[2]["translation"] == "Hello there."


def test_an_html_snippet_keeps_its_tags(server: TorchServe) -> None:
    html = (
        '<div class="news"><h1 id="t">今天的新闻</h1><p>他说：<a href="https://example.com/?a=1&amp;b=2" '
        'title="链接！">点击这里</a>了解更多。</p><!-- 不翻译 --><pre>代码。</pre><br/>结束。</div>'
    )
    response = server.client.translate(html, format="html")
    assert response.status_code == 200, response.text
    translation = response.json()["translation"]
    tags = re.compile(r"<[^>]+>")
    assert tags.findall(translation) == tags.findall(html)
    assert "<pre>代码。</pre>" in translation and "<!-- 不翻译 -->" in translation
    assert "今天的新闻" not in translation


def test_english_only_text_comes_back_unchanged(server: TorchServe) -> None:
    texts = ["Hello, world! See https://example.com.", "你好。"]
    response = server.client.translate(texts)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["translations"][0] == texts[0]
    assert body["untranslated"] == [0]


def test_japanese_is_refused_by_name(server: TorchServe) -> None:
    response = server.client.translate("私は学生です。よろしくお願いします。")
    assert response.status_code == 422
    assert "Japanese" in response.json()["message"]


def test_a_repeated_request_raises_the_cache_hit_metric(server: TorchServe) -> None:
    def hits() -> float:
        metrics = requests.get(f"{server.client.endpoints.metrics}/metrics", timeout=30).text
        values = re.findall(
            r'^SentenceCacheHits\{Variant="int8",ModelName="zh_en".*\} ([0-9.]+)$', metrics, re.M
        )
        return sum(float(value) for value in values)

    text = "缓存测试的第一句。缓存测试的第二句。"
    before = hits()
    cached = 0
    # Each of the two workers has its own cache: a few repeats reach both.
    for _ in range(6):
        response = server.client.translate(text)
        assert response.status_code == 200, response.text
        cached += response.json()["stats"]["cached"]
    assert cached >= 2
    # The frontend reads worker metrics from their log stream.
    wait_until(
        lambda: hits() >= before + cached, 30, lambda: f"cache hits {hits()} < {before} + {cached}", 0.5
    )
