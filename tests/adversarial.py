"""Worst cases for the text stages, by pattern shape, sized at the documented limits.

Random strings almost never contain what makes a regular expression or a text loop slow: a long
run of the one character class a repeat eats, the same tag a hundred times, a line break that two
alternatives both read, an opener that is never closed, a terminator after every long word. This
module writes those inputs on purpose, for every format and for the LibreTranslate routes, so the
unit tests (tests/unit/test_text_cost.py) and the fuzz campaign (tests/fuzz_text.py) share them.

A case is deterministic (no randomness): the same list every run, so a slow one is found again.
"""

from __future__ import annotations

import base64
import functools
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from xml.sax.saxutils import escape

Entry = Literal["text", "html", "srt", "vtt", "markdown", "libretranslate", "docx", "odt"]
OfficeEntry = Literal["docx", "odt"]
OFFICE_ENTRIES: tuple[OfficeEntry, ...] = ("docx", "odt")
ENTRIES: tuple[Entry, ...] = ("text", "html", "srt", "vtt", "markdown", "libretranslate", *OFFICE_ENTRIES)
# docs/API.md "Limits": characters per text (max_chars_per_text).
MAX_CHARS = 5000
# Every line break some code here or in a parser may read: CommonMark, SRT and WebVTT break at the
# first three, str.splitlines() at all of them, the sentence splitter at the first five.
LINE_BREAKS = ("\n", "\r\n", "\r", "\u2028", "\u2029", "\x85", "\v", "\f")
SRT_CUE = "1\n00:00:01,000 --> 00:00:02,000\n"
VTT_HEADER = "WEBVTT\n\n"
VTT_CUE = "00:01.000 --> 00:02.000\n"


@dataclass(frozen=True)
class Case:
    entry: Entry
    shape: str  # what the input is made of, for reports: "srt: tags before a dash", ...
    text: str


def fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    """head, unit repeated, tail: exactly `size` characters (the last repeat cut short)."""
    room = max(size - len(head) - len(tail), 0)
    body = (unit * (room // max(len(unit), 1) + 1))[:room]
    return head + body + tail


# Runs of one character class: each is what some repeat in the audited patterns eats.
RUNS = {
    "latin": "a",
    "upper": "A",
    "digits": "1",
    "han": "你",
    "spaces": " ",
    "tabs": "\t",
    "ideographic space": "\u3000",
    "dots": ".",
    "cjk full stops": "。",
    "ellipsis": "…",
    "question marks": "?",
    "less-than": "<",
    "greater-than": ">",
    "ampersands": "&",
    "percent": "%",
    "braces": "{",
    "closing braces": "}",
    "brackets": "[",
    "parentheses": "(",
    "book-title openers": "《",
    "straight quotes": '"',
    "curly quotes": "“",
    "backslashes": "\\",
    "asterisks": "*",
    "underscores": "_",
    "backticks": "`",
    "tildes": "~",
    "pipes": "|",
    "hashes": "#",
    "dashes": "-",
    "em dashes": "—",
    "plus signs": "+",
    "equals signs": "=",
    "colons": ":",
    "slashes": "/",
    "at signs": "@",
    "exclamation marks": "!",
    "private-use": "\ue000",
    "zero-width space": "\u200b",
    "nul": "\x00",
}

# Repeated units: tags, entities, URLs, placeholders, abbreviations, quotations.
REPEATS = {
    "bold tags": "<b>",
    "closing tags": "</b>",
    "tag pairs around han": "<b>你</b>",
    "unclosed tag attributes": "<b a",
    "ssa overrides": "{\\an8}",
    "webvtt voices": "<v a>",
    "webvtt timestamps": "<00:00:01.000>",
    "entities": "&amp;",
    "unterminated entities": "&a",
    "numeric entities": "&#1",
    "urls": "http://a.b/",
    "url dots": "www.a.",
    "email-like": "a@a.",
    "at-dot": "@.",
    "templates": "{{a",
    "brace placeholders": "{a}",
    "printf": "%1$",
    "tokens": "ZX1",
    "spaced tokens": "zx 1 ",
    "terminators after words": "a. ",
    "abbreviations": "Mr. ",
    "initials": "J. ",
    "decimal numbers": "3.5.",
    "dot-letter runs": "a.",
    "han sentences": "你好。",
    "han with ascii terminator": "你好.",
    "quotations": "「好。」",
    "quotation meets quotation": "“好。”",
    "nested brackets": "（(",
    "mixed closers": "）]",
    "dash speakers": "- a",
    "emphasis": "*a ",
    "strong emphasis": "**a",
    "underscore emphasis": "_a_",
    "strikethrough": "~~a",
    "code spans": "`a",
    "links": "[a](",
    "images": "![a](b",
    "link labels": "[a]",
    "autolinks": "<a:",
    "html comments": "<!--",
    "escapes": "\\*",
    "table cells": "|a",
    "block quotes": ">",
    "list items": "1. ",
}


def _bodies(size: int) -> Iterator[tuple[str, str]]:
    """(shape, text) pairs that stand for themselves in any format."""
    for name, char in RUNS.items():
        yield f"run of {name}", fill(char, size, head="你好")
        yield f"run of {name} after a long word", fill(char, size, head="你好" + "a" * (size // 2))
    for name, unit in REPEATS.items():
        yield f"repeated {name}", fill(unit, size, head="你好")
        yield f"repeated {name}, one per line", fill(unit + "你\n", size)
    for index, line_break in enumerate(LINE_BREAKS):
        label = repr(line_break)
        yield f"line breaks {label}", fill(line_break, size, head="你好")
        yield f"lines of one letter {label}", fill("a" + line_break, size, head="你好")
        yield f"han lines {label}", fill("你好。" + line_break, size)
        yield f"spaces around line breaks {label}", fill(" " + line_break + " ", size, head="你")
        # Every pair of line breaks next to each other, so "\r" then "\n" is read both ways.
        other = LINE_BREAKS[(index + 1) % len(LINE_BREAKS)]
        yield f"line breaks {label} then {other!r}", fill(line_break + other, size, head="你")
    half = size // 2
    yield "terminators after a long word (issue 24)", "你好" + "a" * 3000 + " b." * ((size - 3002) // 3)
    yield "terminators after long words", fill("a" * 40 + ". ", size, head="你好")
    yield "many terminators", fill("!?", size, head="你好" + "a" * half)
    yield "many cjk terminators", fill("。！？", size, head="你好" + "a" * half)
    yield "unclosed quotations", fill("“你好。", size)
    yield "unclosed brackets then closers", fill("（", half, head="你") + fill("）", size - half)
    yield "openers then one closer", fill("《你", size - 1) + "》"
    yield "openers then closers of another pair", fill("(", half, head="你") + fill("》", size - half)
    yield "straight quotes around terminators", fill('"a." ', size, head="你")
    # A wrapped line's cut before a digit run: a backtracking number pattern made it quadratic.
    yield "a digit run after a space, on a second line", fill("1", size - 1, head="你好\na ") + "x"


def _srt(body: str) -> str:
    return SRT_CUE + "你好\n" + body + "\n"


def _vtt(body: str) -> str:
    return VTT_HEADER + VTT_CUE + "你好\n" + body + "\n"


def _format_shapes(size: int) -> Iterator[Case]:
    """Inputs only one format reads specially: its own markup, unclosed."""
    for tags in (22, 40, 400):  # issue 24: 22 tags took 0.43 s, 40 hours
        yield Case(
            "srt", f"srt: {tags} tags then text on a cue's second line (issue 24)", _srt("<b>" * tags + "x")
        )
        yield Case("vtt", f"vtt: {tags} tags then text on a cue's second line", _vtt("<b>" * tags + "x"))
    yield Case(
        "srt", "srt: tags before a dash", fill("<i>", size - 40, head=SRT_CUE + "你好\n", tail="- 你好\n")
    )
    yield Case(
        "srt", "srt: ssa overrides then text", fill("{\\an8}", size - 2, head=SRT_CUE + "你好\n", tail="x\n")
    )
    yield Case(
        "vtt",
        "vtt: voices then text",
        fill("<v a>", size - 2, head=VTT_HEADER + VTT_CUE + "你好\n", tail="x\n"),
    )
    yield Case("vtt", "vtt: unclosed tag", fill("<a", size, head=VTT_HEADER + VTT_CUE + "你好\n"))
    cue_count = size // 40
    srt_cues = "".join(f"{n}\n00:00:01,000 --> 00:00:02,000\n你好\n\n" for n in range(1, cue_count))
    yield Case("srt", "srt: many cues", srt_cues[:size])
    yield Case("srt", "srt: digits up to the refused run", fill("1" * 32 + " ", size, head=SRT_CUE))
    yield Case("srt", "srt: arrows without timings", fill("-->", size, head=SRT_CUE + "你好\n"))
    yield Case("srt", "srt: timings-like lines", fill("1:1:1,1 ", size, head=SRT_CUE + "你好\n"))
    yield Case("srt", "srt: blank lines", fill("\n", size, head=SRT_CUE + "你好\n"))
    yield Case("srt", "srt: blank lines, then no cue", fill("\n", size - 1, tail="x"))
    yield Case("srt", "srt: a cue number and a time, then spaces", fill(" ", size, head="1\n00:00:01,000\n"))
    yield Case(
        "srt",
        "srt: timings then spaces in a cue",
        fill(" ", size - 1, head=SRT_CUE + "你好\n1:1:1,1", tail="x"),
    )
    yield Case("srt", "srt: crlf lines", fill("a\r\n", size, head=SRT_CUE.replace("\n", "\r\n") + "你好\r\n"))
    yield Case("vtt", "vtt: many cues", (VTT_HEADER + (VTT_CUE + "你好\n\n") * (size // 30))[:size])
    yield Case("vtt", "vtt: arrows", fill("-->\n", size, head=VTT_HEADER))
    yield Case("vtt", "vtt: notes", fill("NOTE a\n\n", size, head=VTT_HEADER))
    yield Case("vtt", "vtt: header metadata", fill("a\n", size, head="WEBVTT\n"))
    for lines in (20, 40, (size - 4) // 3):  # issue 24: 20 CRLF lines took 0.2 s, x4 per 2 more
        yield Case(
            "markdown",
            f"markdown: unclosed toml front matter, {lines} crlf lines (issue 24)",
            "+++\n" + "a\r\n" * lines,
        )
    for line_break in ("\n", "\r\n", "\r"):
        yield Case(
            "markdown",
            f"markdown: unclosed toml front matter {line_break!r}",
            fill("a" + line_break, size, head="+++" + line_break),
        )
        yield Case(
            "markdown",
            f"markdown: unclosed yaml front matter {line_break!r}",
            fill("a: b" + line_break, size, head="---" + line_break),
        )
        yield Case(
            "markdown",
            f"markdown: unclosed fence {line_break!r}",
            fill("你好" + line_break, size, head="```" + line_break),
        )
        yield Case("markdown", f"markdown: toml markers {line_break!r}", fill("+++" + line_break, size))
    yield Case("markdown", "markdown: nested emphasis", fill("*你", size // 2) + fill("*", size - size // 2))
    yield Case("markdown", "markdown: nested links", fill("[", size // 2) + fill("]", size - size // 2))
    yield Case("markdown", "markdown: links with open targets", fill("[你](<", size))
    yield Case("markdown", "markdown: nested block quotes", fill(">", size - 3, tail="你好\n"))
    yield Case("markdown", "markdown: nested lists", "".join(" " * depth + "- 你\n" for depth in range(60)))
    yield Case("markdown", "markdown: reference definitions", fill("[a]: b\n", size, tail="[a]\n"))
    yield Case("markdown", "markdown: table", "|a|b|\n|-|-|\n" + fill("|你" * 10 + "|\n", size - 14))
    yield Case("markdown", "markdown: wide table row", "|a|b|\n|-|-|\n" + fill("|你", size - 14))
    yield Case("markdown", "markdown: html block", fill("<div>你\n", size))
    yield Case("markdown", "markdown: one paragraph of many lines", fill("你好\n", size))
    yield Case("markdown", "markdown: hard breaks", fill("你好\\\n", size))
    yield Case("markdown", "markdown: setext underlines", fill("你好\n===\n", size))
    yield Case("html", "html: unclosed comment", fill("a", size, head="<p>你好<!--"))
    yield Case("html", "html: unclosed tag", fill(" a", size, head="<p>你好<b"))
    yield Case("html", "html: unclosed attribute", fill("a", size, head="<p>你好<a href='"))
    yield Case("html", "html: unclosed script", fill("你好", size, head="<script>"))
    yield Case("html", "html: inline tags", fill("<b>你</b>", size, head="<p>"))
    yield Case("html", "html: block tags", fill("<p>你", size))
    yield Case("html", "html: entities", fill("&amp;你", size, head="<p>"))
    yield Case("html", "html: lines", fill("你好\n", size, head="<p>"))
    yield Case("html", "html: notranslate nesting", fill('<span translate="no">', size))


# A .docx or .odt as small as its reader takes: the main part and what marks the kind.
OFFICE_SHELL = {
    "docx": (
        '<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
        'wordprocessingml/2006/main"><w:body>',
        "</w:body></w:document>",
    ),
    "odt": (
        '<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:'
        'opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0">'
        "<office:body><office:text>",
        "</office:text></office:body></office:document-content>",
    ),
}
OFFICE_PARAGRAPH = {
    "docx": '<w:p><w:r><w:t xml:space="preserve">{}</w:t></w:r></w:p>',
    "odt": "<text:p>{}</text:p>",
}
OFFICE_MAIN_PART = {"docx": "word/document.xml", "odt": "content.xml"}


def zip_package(entries: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as made:
        for name, data in entries.items():
            made.writestr(name, data, zipfile.ZIP_STORED if name == "mimetype" else compression)
    return out.getvalue()


def office_file(kind: OfficeEntry, main_part: bytes) -> bytes:
    """A package of `kind` around this main part (anything: it may be built to be slow)."""
    marker = (
        {"[Content_Types].xml": b""}
        if kind == "docx"
        else {"mimetype": b"application/vnd.oasis.opendocument.text"}
    )
    return zip_package({**marker, OFFICE_MAIN_PART[kind]: main_part})


def office_body(kind: OfficeEntry, body: str) -> bytes:
    """`body` as a document's paragraphs, one per line ("\n"; every other break stays in the text)."""
    head, tail = OFFICE_SHELL[kind]
    paragraphs = "".join(OFFICE_PARAGRAPH[kind].format(escape(line)) for line in body.split("\n"))
    return (head + paragraphs + tail).encode("utf-8", "surrogatepass")


def as_request_text(data: bytes) -> str:
    """A file as a request's text carries it: base64."""
    return base64.b64encode(data).decode("ascii")


def office_xml_shapes(kind: OfficeEntry, size: int) -> Iterator[tuple[str, bytes]]:
    """Main parts built to be slow for a tag-by-tag reader: each repeats its unit `size` x 20 times
    (100,000 at the documented 5,000 characters; the largest, 3.6 MB, under the main part's 4 MiB)."""
    count = size * 20
    head, tail = OFFICE_SHELL[kind]
    p, r, t = ("w:p", "w:r", "w:t") if kind == "docx" else ("text:p", "text:span", "text:s")
    runs = {
        "docx": "<w:r><w:rPr><w:b/></w:rPr><w:t>你</w:t></w:r><w:r><w:t>好</w:t></w:r>",
        "odt": '<text:span text:style-name="b">你</text:span>好',
    }[kind]
    text = OFFICE_PARAGRAPH[kind].format
    shapes = {
        "nested paragraphs": f"<{p}>" * count + text("你好") + f"</{p}>" * count,
        "tiny runs in one paragraph": f"<{p}>" + runs * (count // 2) + f"</{p}>",
        "unclosed brackets": text("<" * count),
        "entities": text("你" + "&amp;&#20320;" * (count // 2)),
        "empty runs": f"<{p}>" + f"<{r}/>" * count + "你" + f"</{p}>",
        "unclosed runs": f"<{p}>" + f"<{r}>" * count + "你" + f"</{p}>",
        "closers without openers": f"</{r}>" * count + text("你好"),
        "comments and cdata": text("你") + "<!--a-->" * (count // 2) + "<![CDATA[x]]>" * (count // 2),
        "spaces elements": f"<{p}>" + f"<{t}/>你" * count + f"</{p}>",
    }
    for name, xml in shapes.items():
        yield f"{kind}: {name}", (head + xml + tail).encode()


@functools.cache
def _zip_bomb(kind: OfficeEntry) -> bytes:
    return office_file(kind, b"\0" * (64 << 20))  # 0.3 s to deflate: made once


def hostile_packages(kind: OfficeEntry) -> Iterator[tuple[str, bytes]]:
    """Packages that must be refused before much is read."""
    main = OFFICE_MAIN_PART[kind]
    yield f"{kind}: a zip bomb (64 MiB of zeros in 64 KiB)", _zip_bomb(kind)
    yield f"{kind}: 2,000 entries", zip_package({f"x{n}": b"" for n in range(2000)} | {main: b""})
    yield f"{kind}: not a zip", b"PK\x03\x04" + b"x" * 1000
    yield f"{kind}: a main part that is not UTF-8", office_file(kind, "你好".encode("gbk"))


def _office_cases(size: int) -> Iterator[Case]:
    for kind in OFFICE_ENTRIES:
        for shape, body in _bodies(size):
            yield Case(kind, shape, as_request_text(office_file(kind, office_body(kind, body))))
        for shape, main_part in office_xml_shapes(kind, size):
            yield Case(kind, shape, as_request_text(office_file(kind, main_part)))
        for shape, data in hostile_packages(kind):
            yield Case(kind, shape, as_request_text(data))


def cases(size: int = MAX_CHARS) -> list[Case]:
    """Every shape for every entry point, each text at most `size` characters (a .docx or .odt: its
    text at most `size` characters, the file as base64 as long as it comes)."""
    out: list[Case] = []
    for shape, body in _bodies(size):
        out.append(Case("text", shape, body))
        out.append(Case("html", shape, body))
        out.append(Case("markdown", shape, body))
        out.append(Case("libretranslate", shape, body))
        out.append(Case("srt", shape, _srt(body)[:size]))
        out.append(Case("vtt", shape, _vtt(body)[:size]))
    out += _format_shapes(size)
    out += _office_cases(size)
    return [case for case in out if case.text.strip()]
