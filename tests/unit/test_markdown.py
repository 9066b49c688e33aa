"""Markdown: the text of blocks, cells, link labels and alt text is translated; every other byte comes
back as sent.

The round trip runs on generated documents built from front matter (YAML or TOML), headings (ATX
and setext), paragraphs wrapped over lines (with hard breaks), block quotes, lists, tables, fenced
and indented code, HTML blocks, reference definitions and thematic breaks, with Chinese and ASCII
text, code spans, emphasis, links, images, autolinks, inline HTML, escapes and entities inside.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.text.documents import plan_document
from handlers.text.glossary import Glossary
from handlers.text.markdown import markdown_parts
from tests.examples import examples
from tests.unit.round_trip import chinese_left, lines_of, marked, skeleton, translated, untranslated

TEXT = ["你好", "世界。", "今天天气很好，", "我们去公园！", "Hello", "world.", "3.5", "{name}", "%s"]
# Inline constructs, each with the bytes that must come back as they are.
INLINE: list[tuple[str, list[str]]] = [
    (" `代码` ", ["`代码`"]),
    (" `a  b` ", ["`a  b`"]),
    ("**重要**", []),
    ("*强调*", []),
    ("_斜体_", []),
    ("~~删除~~", []),
    ('[链接](https://example.com/路径 "标题")', ['](https://example.com/路径 "标题")']),
    (" [文档][ref] ", ["][ref]"]),
    (" [ref] ", ["[ref]"]),
    ("![图片说明](img.png)", ["](img.png)"]),
    ("<https://example.com>", ["<https://example.com>"]),
    ('<span class="x">', ['<span class="x">']),
    ("</span>", ["</span>"]),
    ("\\*", ["\\*"]),
    ("&amp;", ["&amp;"]),
    (" https://example.com/a?b=1 ", ["https://example.com/a?b=1"]),
]
CODE_BLOCKS = [
    '```python\nprint("中文")\n# 注释：不翻译\n```',
    "~~~\n代码块，不翻译。\n~~~",
    "    缩进代码，不翻译。\n    第二行",
    '<div class="note">\n中文内容，不翻译。\n</div>',
    '[ref]: https://example.com/参考 "参考标题"',
    "***",
    "___",
]
FRONT_MATTER = ["---\ntitle: 标题\ntags: [中文]\n---", '+++\ntitle = "标题"\n+++']


@st.composite
def inline_line(draw: st.DrawFn, atoms: list[str], cell: bool = False) -> str:
    """A line of inline content; it opens with Chinese, so it never opens a block of its own."""
    line = draw(st.sampled_from(["你好", "我们", "中文"]))
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            line += draw(st.sampled_from(["", " "])) + draw(st.sampled_from(TEXT))
        else:
            source, verbatim = draw(st.sampled_from(INLINE + ([(" \\| ", ["\\|"])] if cell else [])))
            line += source
            atoms += verbatim
    return line


@st.composite
def markdown_documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A document and the bytes in it that must come back as they are."""
    atoms: list[str] = []
    blocks: list[str] = []
    if draw(st.booleans()):
        blocks.append(draw(st.sampled_from(FRONT_MATTER)))
        atoms.append(blocks[-1])
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["paragraph", "atx", "setext", "quote", "list", "table", "verbatim"]))
        line = inline_line(atoms)
        if kind == "paragraph":
            breaks = st.sampled_from(["\n", "\n", "  \n", "\\\n"])
            lines = [draw(line) for _ in range(draw(st.integers(1, 3)))]
            blocks.append(lines[0] + "".join(draw(breaks) + next_line for next_line in lines[1:]))
        elif kind == "atx":
            closing = draw(st.sampled_from(["", " #", " ###"]))
            blocks.append("#" * draw(st.integers(1, 6)) + " " + draw(line) + closing)
        elif kind == "setext":
            blocks.append(draw(line) + "\n" + draw(st.sampled_from(["===", "---"])))
        elif kind == "quote":
            blocks.append("\n".join("> " + draw(line) for _ in range(draw(st.integers(1, 3)))))
        elif kind == "list":
            marker = draw(st.sampled_from(["- ", "* ", "+ ", "1. "]))
            items = [marker + draw(line) for _ in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                items[-1] += "\n" + " " * len(marker) + draw(line)  # a continuation line
            blocks.append("\n".join(items))
        elif kind == "table":
            cell = inline_line(atoms, cell=True)
            rows = [f"| {draw(cell)} | {draw(cell)} |" for _ in range(draw(st.integers(1, 3)))]
            blocks.append("\n".join([rows[0], "| --- | :-: |", *rows[1:]]))
        else:
            if blocks and blocks[-1].startswith(("- ", "* ", "+ ", "1. ")):
                blocks.append("段落。")  # an indented block after a list would belong to its last item
            blocks.append(draw(st.sampled_from(CODE_BLOCKS)))
            atoms.append(blocks[-1])
    text = draw(st.sampled_from(["\n\n", "\n\n\n"])).join(blocks) + draw(st.sampled_from(["", "\n"]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return text.replace("\n", eol), [atom.replace("\n", eol) for atom in atoms]


@settings(max_examples=examples(300), deadline=None)
@given(markdown_documents())
def test_untranslated_markdown_gives_the_document_back_byte_for_byte(document: tuple[str, list[str]]) -> None:
    text, _ = document
    assert untranslated(plan_document(text, "markdown")) == text


@settings(max_examples=examples(300), deadline=None)
@given(markdown_documents())
def test_a_translation_changes_the_text_and_nothing_else(document: tuple[str, list[str]]) -> None:
    text, atoms = document
    output = translated(text, "markdown")
    # Code, targets, front matter, markers, pipes and blank lines as sent; no Chinese left to translate.
    assert skeleton(markdown_parts(output)) == skeleton(markdown_parts(text))
    assert chinese_left(markdown_parts(output)) == []
    for atom in atoms:
        assert output.count(atom) >= text.count(atom), atom


DOCUMENT = """\
---
title: 标题
---

# 第一章 #

这是**重要**的事情，见[文档](https://example.com/路径 "标题")和`代码`。
<span>第二行</span>继续说明&amp;总结。

> 引用第一行，
> 引用第二行。

1. 项目一
2. 项目二 ![图片说明](a.png "图题")

| 名称 | 说明 |
|:--|--:|
| 苹果 | 水果 \\| `红色` |

```python
print("中文")
```

<div>不翻译。</div>

见 [参考] 和 <https://example.com/中文>。

[参考]: https://example.com "参考"
"""


def test_markdown_syntax_targets_and_code_stay_in_place() -> None:
    document = plan_document(DOCUMENT, "markdown")
    assert document.model_inputs == [
        "第一章",
        "这是ZX1重要ZX2的事情，见ZX3文档ZX4和ZX5。",
        "第二行ZX1继续说明ZX2总结。",
        "引用第一行，引用第二行。",
        "项目一",
        "项目二 ZX1图片说明",
        "名称",
        "说明",
        "苹果",
        "水果",
        "见 ZX1 和 ZX2。",
    ]
    rendered = document.render(marked(document.model_inputs)).text
    assert rendered == (
        DOCUMENT.replace("# 第一章 #", "# EN(第一章) #")
        .replace("这是**重要**的事情，见[文档](https://", "EN(这是**重要**的事情，见[文档](https://")
        .replace("和`代码`。", "和`代码`。)")
        .replace("<span>第二行</span>继续说明&amp;总结。", "<span>EN(第二行</span>继续说明&amp;总结。)")
        # The quoted sentence spans two lines: its translation is cut back into two, each quoted.
        .replace("> 引用第一行，\n> 引用第二行。", "> EN(引用第一\n> 行，引用第二行。)")
        .replace("1. 项目一", "1. EN(项目一)")
        .replace("2. 项目二 ![图片说明](a.png", "2. EN(项目二 ![图片说明)](a.png")
        .replace("| 名称 | 说明 |", "| EN(名称) | EN(说明) |")
        .replace("| 苹果 | 水果 \\| `红色` |", "| EN(苹果) | EN(水果) \\| `红色` |")
        .replace("见 [参考] 和 <https://example.com/中文>。", "EN(见 [参考] 和 <https://example.com/中文>。)")
    )


def test_a_wrapped_paragraph_is_one_sentence_cut_back_into_its_lines() -> None:
    text = "- 他昨天晚上在家里\n  看了一部很长的电影，  \n  然后就睡觉了。\n"
    document = plan_document(text, "markdown")
    assert document.model_inputs == ["他昨天晚上在家里看了一部很长的电影，然后就睡觉了。"]
    output = document.render(["Last night he watched a very long film at home, then went to bed."]).text
    # Three lines, the list item's indentation and the hard break ("  ") where the source had them.
    assert output == "- Last night he watched\n  a very long film at  \n  home, then went to bed.\n"
    assert lines_of(output) == lines_of(text)


def test_a_paragraph_without_chinese_is_not_sent_to_the_model() -> None:
    text = "# Title\n\nJust English, with `code` and a [link](https://example.com).\n\n中文段落。\n"
    document = plan_document(text, "markdown")
    assert document.model_inputs == ["中文段落。"]
    assert document.render(["A Chinese paragraph."]).text == text.replace(
        "中文段落。", "A Chinese paragraph."
    )


def test_a_shortcut_reference_keeps_its_label_which_names_the_definition() -> None:
    text = "请看[示例]和[说明][示例]。\n\n[示例]: https://example.com\n"
    document = plan_document(text, "markdown")
    assert document.model_inputs == ["请看ZX1和ZX2说明ZX3。"]
    assert document.render(["See ZX1 and ZX2 notes ZX3."]).text == text.replace(
        "请看[示例]和[说明][示例]。", "See [示例] and [ notes ][示例]."
    )


def test_a_document_of_code_and_front_matter_only_has_nothing_to_translate() -> None:
    text = '+++\ntitle = "标题"\n+++\n\n```\n中文\n```\n\n    缩进的中文\n'
    assert plan_document(text, "markdown").model_inputs == []


def test_glossary_terms_are_rendered_in_text_and_left_alone_in_code() -> None:
    text = "使用`北京`前往北京。\n\n```\n北京\n```\n"
    document = plan_document(text, "markdown", Glossary({"北京": "Beijing"}))
    assert document.model_inputs == ["使用ZX1前往ZX2。"] and document.glossary_hits == 1
    rendered = document.render(["Use ZX1 to go to ZX2."]).text
    assert rendered == "Use `北京` to go to Beijing.\n\n```\n北京\n```\n"
