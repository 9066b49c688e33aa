"""SubRip (.srt) and WebVTT (.vtt) subtitles: each cue's text is translated, every other byte copied.

Parsers, measured on tests/unit/test_subtitles.py's generated files (CRLF or LF, BOMs, extra blank
lines, "," or "." timings, coordinates, settings, NOTE/STYLE/REGION blocks, tags); of 300 files
each, a library's own writer gave back 36 (srt), 36 (pysrt) and 7 (webvtt-py) byte for byte, the
cut below all 300:
- SRT: `srt` 3.5.3. srt.parse() validates the file (its SRTParseError names the bytes no cue
  explains), and its SRT_REGEX, the very pattern parse() runs, gives each cue's text span in the
  original, so numbers, timings and blank lines are never rewritten. srt.compose() renumbers
  cues, writes "00:00:01.500" as "00:00:01,500", turns CRLF into LF and evens out blank lines.
  pysrt 1.1.2 rewrites timings and blank lines the same way and gives no offsets: nothing to add.
- WebVTT: `webvtt-py` 0.6.0. It says what a block is (WebVTTCueBlock.is_valid and parse_item,
  which reads the timings; NOTE, STYLE, REGION) but gives no offsets, and its writer normalises
  ("00:01.000" becomes "00:00:01.000"), so blocks are cut here over the original lines by the
  rule it implements (a block ends at an empty line; a "-->" line that cannot be this block's
  timings starts the next one); a test checks the cut against webvtt-py's own.

A cue's lines are one unit (handlers.text.wrapping): joined for the model, the translation cut
back into as many lines. A line that opens with a dialogue dash or a <v Speaker> voice starts a
new unit, since two speakers are two sentences; so does a line after a blank one. Styling tags
(<i>, <b>, <u>, <font>, <c.class>, <v Name>, <ruby>, <00:00:01.000>, SSA {\\an8}) are protected
spans: at a sentence's edge they never reach the model, inside it the model carries a token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

import srt
from webvtt.vtt import (
    WebVTTCommentBlock,
    WebVTTCueBlock,
    WebVTTRegionBlock,
    WebVTTStyleBlock,
    parse_item,
)

from handlers.errors import Unparsable
from handlers.text.budget import check
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.wrapping import Lines, lines_unit, source_lines, stripped

SubtitleFormat = Literal["srt", "vtt"]

_SSA_OVERRIDE = r"\{\\[^{}\r\n]*\}"  # {\an8}
_SRT_TAG = rf"</?[A-Za-z][^<>\r\n]*>|{_SSA_OVERRIDE}"  # HTML-like styling, SSA overrides
_VTT_TAG = r"<[^<>\r\n]*>"  # in WebVTT cue text every "<" opens a tag (a literal one is &lt;)
_DASH = r"[-‐–—](?!\d)[ \t]*"  # a dialogue dash, not a minus sign
TAGS = {"srt": re.compile(_SRT_TAG), "vtt": re.compile(_VTT_TAG)}
DIALOGUE_DASH = re.compile(_DASH)
# A cue line that opens (after any tags) with a dash or a voice is a new speaker. The tags are
# those of either format: _VTT_TAG reads every HTML-like SRT tag too, so the two are not both tried
# (a run of n tags that each could read two ways was 2^n tries: 40 "<b>" took hours), and each
# tag ends at its first ">" or "}", so a run of tags splits one way only.
_NEW_SPEAKER = re.compile(rf"(?:{_VTT_TAG}|{_SSA_OVERRIDE})*?(?:<v[\s.>]|{_DASH})")
_CONTENT = 5  # SRT_REGEX's group for a cue's text
# srt takes a block whose arrow is mistyped ("->") as more text of the cue above: say so instead.
_MAX_DIGITS = 32
_LONG_DIGITS = re.compile(rf"[0-9]{{{_MAX_DIGITS + 1},}}")
# Possessive: the spaces around the dashes read one way only (two [ \t]* around an empty -* could
# split a long run of spaces every way, quadratic in its length).
_NON_SPACE = re.compile(r"\S")
_TIMINGS_IN_TEXT = re.compile(r"[ \t]*+\d++:\d++:\d++[,.]\d++[ \t]*+-*+[ \t]*+>")
_EXPECTED_SRT = 'a cue (a number, then timings like "00:00:01,000 --> 00:00:04,000", then its text)'
_EXPECTED_VTT = (
    'a cue (timings like "00:00:01.000 --> 00:00:04.000", then its text) or a NOTE, STYLE or REGION block'
)


def subtitle_parts(text: str, kind: SubtitleFormat, glossary: Glossary = NO_GLOSSARY) -> list[str | Lines]:
    """The file as copied strings and translatable units, in order; raises Unparsable where it is not
    a subtitle file of that kind."""
    cue_texts = _srt_cue_texts(text) if kind == "srt" else _vtt_cue_texts(text)
    parts: list[str | Lines] = []
    position = 0
    for start, end in cue_texts:
        check()
        for unit in _units(text, start, end, kind, glossary):
            parts += [text[position : unit.start], unit]
            position = unit.end
    parts.append(text[position:])
    return [part for part in parts if part != ""]


def _units(text: str, start: int, end: int, kind: SubtitleFormat, glossary: Glossary) -> Iterator[Lines]:
    """A cue text's units: runs of non-blank lines, a new one at each new speaker."""
    unit: list[tuple[int, int]] = []
    for line in source_lines(text, start, end):
        check()
        core = stripped(text, line)
        if unit and (core[0] == core[1] or _NEW_SPEAKER.match(text, *core)):
            yield _unit(text, unit, kind, glossary)
            unit = []
        if core[0] < core[1]:
            unit.append(core)
    if unit:
        yield _unit(text, unit, kind, glossary)


def _unit(text: str, lines: list[tuple[int, int]], kind: SubtitleFormat, glossary: Glossary) -> Lines:
    markup = [match.span() for start, end in lines for match in TAGS[kind].finditer(text, start, end)]
    for start, end in lines:
        # A dialogue dash opens the line, after any tags: "{\an8}- 你好".
        opening = start
        while tag := TAGS[kind].match(text, opening, end):
            check()
            opening = tag.end()
        dash = DIALOGUE_DASH.match(text, opening, end)
        if dash:
            markup.append(dash.span())
    return lines_unit(text, lines, markup, glossary, html=kind == "vtt")


def _srt_cue_texts(text: str) -> list[tuple[int, int]]:
    bom = 1 if text.startswith("\ufeff") else 0  # srt accepts a BOM only right before a cue
    # SRT_REGEX backtracks polynomially over long digit runs it cannot match (5,000 digits took
    # minutes, and TorchServe killed the worker); at most 32 digits keep it linear.
    run = _LONG_DIGITS.search(text)
    if run is not None:
        raise Unparsable(
            f"not SRT: {_where(text, run.start())}: a run of more than {_MAX_DIGITS} digits, "
            "which no cue number, timing or subtitle needs"
        )
    spans, unmatched = _srt_cues(text, bom)
    if unmatched is not None:
        at = _first_non_space(text, unmatched)
        raise Unparsable(f"not SRT: {_where(text, at)}: expected {_EXPECTED_SRT}, got {_line_at(text, at)!r}")
    for start, end in (line for span in spans for line in source_lines(text, *span)):
        check()
        if _TIMINGS_IN_TEXT.match(text, start, end):
            raise Unparsable(
                f"not SRT: {_where(text, start)}: cue timings inside the text of the cue above, "
                f'got {text[start:end][:60]!r}: is its arrow ("-->"), number or blank line amiss?'
            )
    return spans


def _srt_cues(text: str, start: int) -> tuple[list[tuple[int, int]], int | None]:
    """Each cue's text span as srt.parse(text[start:]) reads the file, and where the first bytes that
    no cue explains start (None: there are none).

    srt.parse() runs SRT_REGEX.finditer() and refuses any gap between two matches. Where no cue
    matches, finditer tries every later position, and SRT_REGEX opens with \\s*: each position of a
    long run of whitespace read the run to its end (5,000 blank lines took 0.6 s). Trying the one
    position where the next cue must start finds the same cues and the same first gap: a cue
    found further on after nothing but whitespace would have matched here already (its \\s* takes
    that whitespace too). srt lets the file open with whitespace, or with one more BOM, before a cue.
    """
    spans: list[tuple[int, int]] = []
    position = start
    while position < len(text):
        check()
        cue = srt.SRT_REGEX.match(text, position)
        if cue is None and position == start and text.startswith("\ufeff", start):
            cue = srt.SRT_REGEX.match(text, start + 1)
        if cue is None:
            rest = text[position:]
            return spans, None if position == start and (rest.isspace() or rest == "\ufeff") else position
        spans.append(cue.span(_CONTENT))
        position = cue.end()
    return spans, None


def _first_non_space(text: str, offset: int) -> int:
    found = _NON_SPACE.search(text, offset)
    return found.start() if found else len(text)


def _vtt_cue_texts(text: str) -> list[tuple[int, int]]:
    start = 1 if text.startswith("\ufeff") else 0
    lines = source_lines(text, start)
    first = text[slice(*lines[0])]
    if not (first.startswith("WEBVTT") and first[6:7] in ("", " ", "\t")):
        raise Unparsable(f'not WebVTT: line 1: expected "WEBVTT" to open the file, got {first[:60]!r}')
    cue_texts: list[tuple[int, int]] = []
    blocks = _blocks(text, lines)
    next(blocks)  # the header: WEBVTT and its metadata lines
    for block in blocks:
        check()
        block_lines = [text[start:end] for start, end in block]
        if WebVTTCueBlock.is_valid(block_lines):
            timings = 0 if WebVTTCueBlock.CUE_TIMINGS_PATTERN.match(block_lines[0]) else 1
            if parse_item(block_lines) is None:  # webvtt-py could not read the times
                got = block_lines[timings][:60]
                raise Unparsable(
                    f"not WebVTT: {_where(text, block[timings][0])}: unreadable cue timings {got!r}"
                )
            if len(block) > timings + 1:
                cue_texts.append((block[timings + 1][0], block[-1][1]))
        elif not (
            WebVTTCommentBlock.is_valid(block_lines)
            or WebVTTStyleBlock.is_valid(block_lines)
            or WebVTTRegionBlock.is_valid(block_lines)
        ):
            got = block_lines[0][:60]
            raise Unparsable(
                f"not WebVTT: {_where(text, block[0][0])}: expected {_EXPECTED_VTT}, got {got!r}"
            )
    return cue_texts


def _blocks(text: str, lines: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    """The WebVTT blocks (as webvtt-py cuts them): an empty line ends one, and a line with "-->"
    starts one unless it can be the current block's timings (its first line, or its second after
    an identifier)."""
    block: list[tuple[int, int]] = []
    in_header = True
    for line in lines:
        check()
        content = text[slice(*line)]
        arrow_starts = (
            bool(block)
            and "-->" in content
            and (in_header or len(block) > 1 or "-->" in text[slice(*block[0])])
        )
        if (not content or arrow_starts) and block:
            yield block
            block, in_header = [], False
        if content:
            block.append(line)
    if block:
        yield block


def _where(text: str, offset: int) -> str:
    return f"line {len(source_lines(text, 0, offset))}"


def _line_at(text: str, offset: int) -> str:
    line = re.match(r"[^\r\n]*", text[offset:])
    return line.group()[:60] if line else ""
