"""A block a format wraps over several source lines (a subtitle cue, a Markdown paragraph) as one unit.

Subtitles break lines mid-sentence ("我们明天\\n去公园。") and Markdown source is often hard-wrapped:
a line alone is half a clause, and English orders the words differently. So the model sees a
block's lines joined, as a browser shows wrapped HTML (nothing between two Han characters, else a
space), and each line break is kept aside with the bytes around it ("\\n> " in a block quote,
"  \\n" for a hard break, "\\r\\n"). A translation is cut back into as many lines as its source
sentence had, at spaces, as evenly as it goes: a two-line cue stays two lines on screen and a
quoted paragraph keeps its "> " on every line. A line break between two sentences stays where it
was. When a translation has too few places to cut, it gets fewer lines; never an empty one, which
would end a cue or a paragraph.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from handlers.text.budget import check
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.protection import Protected, protect

# The line terminators of SRT, WebVTT and CommonMark (not U+2028, which none of them breaks at).
LINE_TERMINATOR = re.compile(r"\r\n|\r|\n")
# Starts only where whitespace starts (see splitting.WRAPPED_LINE: else a long run of spaces with no
# line break is read to its end from each of its positions).
_ANY_LINE_BREAK = re.compile(r"(?<!\s)\s*(?:\r\n|\n|\r|\u2028|\u2029)\s*")
_SPACES = re.compile(r"[ \t\u3000]+")
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_BETWEEN_HAN = re.compile(f"(?<=[{_HAN}])(?=[{_HAN}])")
_TOKEN = re.compile(r"(?i)zx\s?(\d+)")
# A line that starts like this could become a list item, a quote, a heading, a setext underline, a
# table row, a fence or an HTML block in Markdown, or a second speaker (a dash, a WebVTT voice) in a
# subtitle: no cut puts a word there.
_STARTS_MARKUP = re.compile(r"[-‐–—+*#>=|`~<]|\d{1,9}[.)](?:\s|$)")
# A last line that is only a number ("3", "3.5") reads as the next cue's number to SRT readers
# (srt.SRT_REGEX lets a blank line stand between a cue's number and its timing): no cut leaves one.
_CUE_NUMBER = re.compile(r"-?[0-9]++(?:\.[0-9]*+)?\s*+")  # possessive: no backtracking over a digit run


@dataclass(frozen=True)
class Lines:
    """One unit of a wrapped format, from source[start:end]: its lines joined by "\\n", inline markup
    as protected spans; line_breaks[k] is the source text where the k-th "\\n" stands."""

    start: int
    end: int
    protected: Protected
    line_breaks: tuple[str, ...]


def source_lines(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each line of text[start:end], without its terminator."""
    end = len(text) if end is None else end
    lines: list[tuple[int, int]] = []
    position = start
    for match in LINE_TERMINATOR.finditer(text, start, end):
        lines.append((position, match.start()))
        position = match.end()
    lines.append((position, end))
    return lines


def stripped(text: str, line: tuple[int, int]) -> tuple[int, int]:
    """The line without the whitespace at its ends (empty where the line is blank)."""
    start, end = line
    body = text[start:end]
    lead = len(body) - len(body.lstrip())
    return start + lead, start + lead + len(body.strip())


def lines_unit(
    source: str,
    lines: Sequence[tuple[int, int]],
    markup: Sequence[tuple[int, int]] = (),
    glossary: Glossary = NO_GLOSSARY,
    html: bool = False,
) -> Lines:
    """The unit made of source[start:end] for each (non-empty, ordered) line; each markup span, inside
    one line, is kept as one protected span and the text between is protected as usual."""
    protected = Protected("", glossary=glossary)
    breaks: list[str] = []
    spans = sorted(markup)
    next_span = 0
    for index, (start, end) in enumerate(lines):
        check()
        if index:
            breaks.append(source[lines[index - 1][1] : start])
            protected.text += "\n"
        position = start
        while next_span < len(spans) and spans[next_span][0] < end:
            check()
            span_start, span_end = spans[next_span]
            next_span += 1
            if position <= span_start and span_end <= end:
                protect(source[position:span_start], html=html, into=protected)
                protected.text += protected.slot_for(source[span_start:span_end])
                position = span_end
        protect(source[position:end], html=html, into=protected)
    return Lines(lines[0][0], lines[-1][1], protected, tuple(breaks))


def wrap(translation: str, breaks: int, spans: Sequence[str] = ()) -> str:
    """A sentence's translation (tokens ZX1.. for its spans, still in place) cut into breaks + 1 lines
    at spaces, or between two Han characters, as evenly as it goes; "\\n" at each cut."""
    text = _ANY_LINE_BREAK.sub(" ", translation)  # the model's own line breaks are not the source's
    if breaks <= 0:
        return text
    cuts = [cut for cut in _cut_points(text) if _may_start_line(text, cut[1], spans)]
    middles = [(start + end) / 2 for start, end in cuts]  # sorted: cuts neither overlap nor touch
    chosen: list[tuple[int, int]] = []
    first = 0  # the first cut after the last one chosen
    for line in range(1, breaks + 1):
        check()
        if first >= len(cuts):
            break
        # Leave a cut for every line still to come, as far as there are cuts.
        last = len(cuts) - min(breaks - line, len(cuts) - first - 1)
        target = len(text) * line / (breaks + 1)
        nearest = bisect.bisect_left(middles, target, first, last)
        best = min(
            (index for index in (nearest - 1, nearest) if first <= index < last),
            key=lambda index: abs(middles[index] - target),
        )
        chosen.append(cuts[best])
        first = best + 1
    out: list[str] = []
    position = 0
    for start, end in chosen:
        out += [text[position:start], "\n"]
        position = end
    out.append(text[position:])
    return "".join(out)


def put_back(text: str, line_breaks: Sequence[str]) -> str:
    """Each "\\n" of text as the source wrote that line break; a "\\n" beyond them is a space."""
    lines = text.split("\n")
    out = [lines[0]]
    for index, line in enumerate(lines[1:]):
        out += [line_breaks[index] if index < len(line_breaks) else " ", line]
    return "".join(out)


def _cut_points(text: str) -> list[tuple[int, int]]:
    """Where a line may end: a run of spaces (replaced by the break), or between two Han characters."""
    cuts = [
        (match.start(), match.end())
        for match in _SPACES.finditer(text)
        if match.start() > 0
        and match.end() < len(text)
        # "ZX 1" is one token spaced by the model: a break inside it would be swallowed by restore().
        and not (text[match.start() - 2 : match.start()].lower() == "zx" and text[match.end()].isdigit())
    ]
    cuts += [(match.start(), match.start()) for match in _BETWEEN_HAN.finditer(text)]
    return sorted(cuts)


def _may_start_line(text: str, position: int, spans: Sequence[str]) -> bool:
    if _CUE_NUMBER.fullmatch(text, position):
        return False
    token = _TOKEN.match(text, position)
    if token and 1 <= int(token.group(1)) <= len(spans):  # the line would open with this span
        return (
            _STARTS_MARKUP.match(spans[int(token.group(1)) - 1] + text[token.end() : token.end() + 12])
            is None
        )
    return _STARTS_MARKUP.match(text, position) is None
