"""Subtitles and Markdown on a real TorchServe: everything but the text comes back byte for byte.

The tiny stand-in's translations are noise, so this checks structure only: the lines that are not
text (numbers, timings, headers, blocks, code, markers), the text lines' markup prefixes, and that
every file keeps its cue and line count.
"""

from __future__ import annotations

import re

import pytest
import srt
import webvtt

from handlers.text.scripts import HAN
from serving.torchserve import TorchServe

pytestmark = pytest.mark.e2e

SRT = (
    "1\r\n00:00:01,000 --> 00:00:04,000 X1:40 X2:600 Y1:20 Y2:50\r\n<i>今天天气很好。</i>\r\n\r\n"
    "2\r\n00:00:05.500 --> 00:00:07,000\r\n{\\an8}- 你好吗？\r\n- 我很好，谢谢。\r\n\r\n"
    "3\r\n00:00:08,000 --> 00:00:09,000\r\nOK, see you.\r\n"
)
VTT = (
    "WEBVTT - 中文字幕\nKind: captions\n\nNOTE 这是注释，不翻译\n\n"
    "STYLE\n::cue(.yellow) { color: yellow; }\n\n"
    "intro\n00:01.000 --> 00:04.000 align:start line:0\n<v Roger>你好，欢迎来到北京。</v>\n\n"
    "00:00:05.000 --> 00:00:07.000\n<c.yellow>这是第二句。</c>\n第三句在这里。\n"
)
MARKDOWN = """\
---
title: 中文标题
---

# 第一章

这是**重要**的事情，见[文档](https://example.com/路径 "标题")和`代码`。

> 引用的一句话。

- 第一项。
- 第二项 ![图片说明](a.png)

| 名称 | 说明 |
|---|:-:|
| 苹果 | 水果 |

```python
print("中文")
```
"""


def text_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def before_chinese(line: str) -> str:
    """A line's markup prefix: everything before its first Chinese character."""
    found = HAN.search(line)
    return line if found is None else line[: found.start()]


def test_subtitles_and_markdown_keep_everything_but_their_text(server: TorchServe) -> None:
    answers = {}
    for kind, text in (("srt", SRT), ("vtt", VTT), ("markdown", MARKDOWN)):
        response = server.client.translate(text, format=kind)
        assert response.status_code == 200, response.text
        answers[kind] = response.json()["translation"]
        translation = answers[kind]
        assert translation.count("\r\n") == text.count("\r\n")
        source_lines, lines = text_lines(text), text_lines(translation)
        assert len(lines) == len(source_lines), kind
        for source, line in zip(source_lines, lines, strict=True):
            # A line without Chinese (a number, timings, a header, a blank) or inside copied markup
            # (front matter, code) comes back as it was; a text line keeps its markup prefix.
            copied = not HAN.search(source) or source.startswith(("title:", "print(", "NOTE", "WEBVTT"))
            assert line == source if copied else line.startswith(before_chinese(source)), (kind, source, line)

    subtitles = list(srt.parse(answers["srt"]))
    assert [cue.index for cue in subtitles] == [1, 2, 3]
    assert text_lines(answers["srt"])[2].endswith(
        "</i>"
    )  # a tag at a sentence's edge never reaches the model
    assert answers["srt"].endswith("\r\nOK, see you.\r\n")
    captions = webvtt.from_string(answers["vtt"]).captions
    assert [(caption.start, caption.end) for caption in captions] == [
        ("00:00:01.000", "00:00:04.000"),
        ("00:00:05.000", "00:00:07.000"),
    ]
    assert text_lines(answers["vtt"])[10].endswith("</v>")
    assert '](https://example.com/路径 "标题")' in answers["markdown"]
    assert '```python\nprint("中文")\n```\n' in answers["markdown"]

    refused = server.client.translate("今天天气很好。", format="srt")
    assert refused.status_code == 400
    assert "not SRT: line 1" in refused.json()["message"]
