"""Markdown: headings, paragraphs, list items, table cells, link labels and image alt text are
translated; every other byte is copied.

Parser: markdown-it-py 4.3.0 (CommonMark, plus GFM tables and strikethrough) with mdit-py-plugins
0.7.0's front_matter for YAML front matter. Its block tokens carry source line maps: each inline token's
lines are found in the original lines, so list and quote markers, heading #s, table pipes and
alignment rows, code blocks, HTML blocks, front matter and reference definitions (no inline token
covers them) are copied as they are. Inside those lines, markdown-it's own inline rules are run
again with each rule's start and end recorded, which says exactly which bytes are syntax: code
spans, emphasis and strikethrough delimiters that paired, link and image brackets and targets,
autolinks, inline HTML, escapes and entities. Those become protected spans; only the text between
reaches the model. A shortcut reference link ([label] or [label][]) is copied whole: its label
names the definition. A block whose lines cannot be found exactly is copied, never guessed at.

Measured on tests/unit/test_markdown.py's generated documents: of 300, this cut gave all back byte
for byte, mistune 3.4.0's Markdown renderer 2 and python-frontmatter 1.3.0's dumps(loads()) none.
mistune keeps no source positions and re-serialises (setext headings become ATX, "|---|:-:|"
becomes "| --- | :---: |"); python-frontmatter re-dumps the YAML (keys sorted, [a] lists as
blocks, the last newline dropped) and reads TOML only through the old `toml` package. TOML front
matter (+++), which no markdown-it plugin reads, is cut off here before parsing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.ruler import RuleOptionsType
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from mdit_py_plugins.front_matter import front_matter_plugin

from handlers.text.budget import check
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.wrapping import LINE_TERMINATOR, Lines, lines_unit, source_lines

# Each line terminator is atomic: "\r\n" is one, never "\r" and then an empty line ending in "\n"
# (which is the same text read a second way, so an unclosed front matter of n CRLF lines was 2^n
# tries). A closing "+++" can only start after a "\n" either way, so what matches is unchanged.
_TOML_FRONT_MATTER = re.compile(
    r"\A\+\+\+[ \t]*+(?>\r\n|\r|\n)(?:[^\r\n]*+(?>\r\n|\r|\n))*?\+\+\+[ \t]*+(?=[\r\n]|\Z)"
)
_EVENTS = "handlers.text.markdown.events"  # the env key under which the tracked rules record
# Rules whose matches are text to translate, or line ends (the unit's line breaks carry those).
_TEXT_RULES = frozenset(["text", "newline", "linkify"])
_PAIRED = frozenset(["emphasis", "strikethrough"])  # delimiters are syntax only once they pair


@dataclass
class _Event:
    """One inline rule's match: src[start:end] of the state it ran in."""

    rule: str
    state: StateInline
    start: int
    end: int
    tokens: list[Token]
    label_end: int = -1  # a link's or image's "]"


InlineRule = Callable[[StateInline, bool], bool]


def _tracked(name: str, rule: InlineRule) -> InlineRule:
    def run(state: StateInline, silent: bool) -> bool:
        check()  # markdown-it's inline loop calls rules over and over: the budget holds inside it
        events: list[_Event] | None = None if silent else state.env.get(_EVENTS)
        if events is None:
            return rule(state, silent)
        start, count, pending, mark = state.pos, len(state.tokens), bool(state.pending), len(events)
        if not rule(state, silent):
            return False
        # The first push flushes pending text into a text token: not this rule's.
        event = _Event(name, state, start, state.pos, state.tokens[count + pending :])
        if name in ("link", "image"):
            image = name == "image"
            event.label_end = state.md.helpers.parseLinkLabel(state, start + image, not image)
        if name == "image":  # its alt text was parsed as a string of its own, from "![" + 2
            for inner in events[mark:]:
                if inner.state is not state:
                    inner.start, inner.end, inner.state = (
                        inner.start + start + 2,
                        inner.end + start + 2,
                        state,
                    )
                    inner.label_end += start + 2 if inner.label_end >= 0 else 0
        events.append(event)
        return True

    return run


def _checked(rule: Callable[..., Any]) -> Callable[..., Any]:
    """A block rule that first checks the request's text budget (markdown-it tries every block rule
    at every line)."""

    def run(*args: Any) -> Any:
        check()
        return rule(*args)

    return run


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"]).use(front_matter_plugin)
    md.disable("inline")  # the core rule: blocks only; inline runs per unit, over the source lines
    ruler = md.inline.ruler
    for name, rule in zip(ruler.get_active_rules(), ruler.getRules(""), strict=True):
        ruler.at(name, _tracked(name, rule))
    block = md.block.ruler
    for name in block.get_active_rules():
        found = block.__rules__[block.__find__(name)]
        options: RuleOptionsType = {"alt": found.alt}  # which rules may end a paragraph: kept
        block.at(name, _checked(found.fn), options)
    return md


_MARKDOWN = _parser()


def markdown_parts(text: str, glossary: Glossary = NO_GLOSSARY) -> list[str | Lines]:
    """The document as copied strings and translatable units, in order."""
    env: dict[str, Any] = {}
    blocks = _MARKDOWN.parse(_blank_toml_front_matter(text), env)
    lines = source_lines(text)
    parts: list[str | Lines] = []
    position = 0
    for index, token in enumerate(blocks):
        check()
        if token.type != "inline" or not token.map:
            continue
        cell = blocks[index - 1].type in ("th_open", "td_open")
        cores = _located(text, lines, token, position, cell)
        if not cores:
            continue
        unit = lines_unit(text, cores, _syntax(text, cores, env), glossary)
        parts += [text[position : unit.start], unit]
        position = unit.end
    parts.append(text[position:])
    return [part for part in parts if part != ""]


def _blank_toml_front_matter(text: str) -> str:
    """TOML front matter as empty lines, so markdown-it skips it and its line numbers still hold."""
    front = _TOML_FRONT_MATTER.match(text)
    if not front:
        return text
    return "\n" * len(LINE_TERMINATOR.findall(front.group())) + text[front.end() :]


def _located(
    text: str, lines: list[tuple[int, int]], token: Token, after: int, cell: bool
) -> list[tuple[int, int]] | None:
    """Where each line of an inline token stands in the source: content line i is source line
    map[0] + i, less the block's markers; a table cell is found in its row after the previous one.
    None when a line cannot be found exactly, or not after the previous unit."""
    assert token.map is not None
    cores: list[tuple[int, int]] = []
    for index, content in enumerate(token.content.split("\n")):
        check()
        core = content.strip()
        if not core:
            continue
        line_start, line_end = lines[token.map[0] + (0 if cell else index)]
        line = text[line_start:line_end].replace("\0", "\ufffd")  # as markdown-it reads it
        if cell:  # markdown-it unescapes \| in a cell's content
            core = core.replace("|", "\\|")
            column = line.find(core, max(after - line_start, 0))
        else:
            column = line.rfind(core)
        if column < 0 or line_start + column < after:
            return None
        cores.append((line_start + column, line_start + column + len(core)))
        after = cores[-1][1]
    for index, (start, end) in enumerate(cores[:-1]):
        # A backslash hard break goes with the line break it makes ("\\\n" stays where the line ends).
        backslashes = len(text[start:end]) - len(text[start:end].rstrip("\\"))
        if backslashes % 2:
            cores[index] = (start, end - 1)
    return [(start, end) for start, end in cores if start < end] or None


def _syntax(text: str, cores: list[tuple[int, int]], env: dict[str, Any]) -> list[tuple[int, int]]:
    """The source spans of a unit's inline syntax, each within one line."""
    joined = "\n".join(text[start:end] for start, end in cores)
    events: list[_Event] = []
    _MARKDOWN.inline.parse(joined, _MARKDOWN, {**env, _EVENTS: events}, [])
    spans: list[tuple[int, int]] = []
    for event in events:
        if event.rule in _TEXT_RULES or (event.rule == "escape" and "\n" in joined[event.start : event.end]):
            continue
        if event.rule in _PAIRED and all(token.type == "text" for token in event.tokens):
            continue  # a lone * or ~ is text
        if event.rule in ("link", "image") and joined[event.label_end + 1 : event.end] not in ("", "[]"):
            label = event.start + (2 if event.rule == "image" else 1)
            spans += [(event.start, label), (event.label_end, event.end)]
            continue
        spans.append((event.start, event.end))
    return _in_source(_merged(spans), cores)


def _in_source(spans: list[tuple[int, int]], cores: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans of the joined lines ("\n" between cores) as source spans, cut at line ends."""
    out: list[tuple[int, int]] = []
    first = 0  # spans before it end before this line
    offset = 0  # where this line starts in the joined lines
    for start, end in cores:
        check()
        length = end - start
        while first < len(spans) and spans[first][1] <= offset:
            first += 1
        for span_start, span_end in _from(spans, first):
            if span_start >= offset + length:
                break
            low, high = max(span_start, offset), min(span_end, offset + length)
            if low < high:
                out.append((start + low - offset, start + high - offset))
        offset += length + 1
    return out


def _from(spans: list[tuple[int, int]], first: int) -> Iterator[tuple[int, int]]:
    """spans[first:] without the copy (a copy per line made a unit of many lines and spans quadratic)."""
    for index in range(first, len(spans)):
        yield spans[index]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
