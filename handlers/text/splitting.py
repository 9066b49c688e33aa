"""Split a text into sentences and the exact whitespace between them, and put it back together.

opus-mt models were trained on sentence pairs: a paragraph decoded as one sequence is slower
(attention is quadratic) and worse. A text becomes a list of pieces whose concatenation is the
text, byte for byte: sentences, and "gaps" (line breaks, blank lines, indentation, the spaces
between sentences). Only sentences reach the model; gaps are copied.

Rules (bench/splitters.py measures them against pysbd and sentencex):
- a line break always ends a sentence in plain text; in HTML source it is whitespace, as a
  browser shows it (split_text(..., line_breaks=False)), and unwrap_lines() turns it into
  what the model should see;
- inside a line, a sentence ends after 。！？；… (and runs of them, like ！？ or ……), after ASCII
  . ! ? ; where they end a sentence (followed by a space, the line's end or a CJK character; a
  "." also not between digits, as in 3.5), and after any closing quotes that follow;
- never inside a matched pair of quotes or brackets (《》「」『』“”‘’（）【】〔〕() [] {}):
  a ！ in a book title or a 。 inside a quotation does not split. A quotation and the words
  after it stay one sentence (「好。」她说。: "she said" belongs to its quote); only where one
  finished quotation is directly followed by another (“还要吗？”“不了。”) do they split.
  An opener without its closer on the same line is ignored, so one stray 《 cannot glue a
  paragraph together;
- a "." after an abbreviation (Mr. Dr. etc.) or an initial (J. K. Rowling) ends nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PAIRS = {
    "《": "》",
    "〈": "〉",
    "「": "」",
    "『": "』",
    "“": "”",
    "‘": "’",
    "（": "）",
    "【": "】",
    "〔": "〕",
    "｛": "｝",
    "(": ")",
    "[": "]",
    "{": "}",
}
CLOSERS = frozenset(PAIRS.values()) | {'"', "'"}
QUOTE_OPENERS = frozenset('“‘「『"')
CJK_TERMINATORS = frozenset("。！？；…｡")
ASCII_TERMINATORS = frozenset(".!?;")
ABBREVIATIONS = frozenset(
    ["Mr", "Mrs", "Ms", "Dr", "Prof", "St", "Jr", "Sr", "vs", "etc", "No", "Vol", "Fig"]
)
LINE_BREAK = re.compile(r"\r\n|\n|\r|\u2028|\u2029")
WRAPPED_LINE = re.compile(r"\s*(?:\r\n|\n|\r|\u2028|\u2029)\s*")
CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


@dataclass(frozen=True)
class Piece:
    """A sentence (sent to the model) or a gap (copied as is)."""

    text: str
    is_sentence: bool


def split_text(text: str, line_breaks: bool = True) -> list[Piece]:
    """Sentences and gaps, in order; "".join(piece.text for piece in result) == text.

    With `line_breaks` off (HTML), a line break is whitespace: it ends no sentence.
    """
    if not line_breaks:
        return _merge_gaps(_split_line(text))
    pieces: list[Piece] = []
    start = 0
    for match in LINE_BREAK.finditer(text):
        pieces += _split_line(text[start : match.start()])
        pieces.append(Piece(match.group(), False))
        start = match.end()
    pieces += _split_line(text[start:])
    return _merge_gaps(pieces)


def unwrap_lines(sentence: str) -> str:
    """A sentence wrapped over source lines (HTML), as a browser shows it: the line break and the
    spaces around it become nothing between two CJK characters, else one space."""

    def join(match: re.Match[str]) -> str:
        before = match.string[match.start() - 1 : match.start()]
        after = match.string[match.end() : match.end() + 1]
        return "" if CJK.match(before) and CJK.match(after) else " "

    return WRAPPED_LINE.sub(join, sentence)


def sentences_of(text: str) -> list[str]:
    return [piece.text for piece in split_text(text) if piece.is_sentence]


def join_sentences(pieces: list[Piece], sentences: list[tuple[str, bool]]) -> str:
    """Gaps verbatim, each sentence piece replaced by (text, translated), in order.

    Chinese puts no space between sentences and English needs one, so where a translated
    sentence meets another sentence with no gap between them, a space is put in.
    """
    replacements = iter(sentences)
    out: list[str] = []
    previous: tuple[str, bool] | None = None
    for piece in pieces:
        if not piece.is_sentence:
            out.append(piece.text)
            previous = None
            continue
        current = next(replacements)
        if previous is not None and (previous[1] or current[1]):
            out.append(" ")
        out.append(current[0])
        previous = current
    return "".join(out)


def _split_line(line: str) -> list[Piece]:
    """One line: leading gap, sentences separated by their (possibly empty) gaps, trailing gap."""
    pieces: list[Piece] = []
    stripped = line.strip()
    if not stripped:
        return [Piece(line, False)] if line else []
    lead = line[: len(line) - len(line.lstrip())]
    trail = line[len(line.rstrip()) :]
    if lead:
        pieces.append(Piece(lead, False))
    body = line[len(lead) : len(line) - len(trail)]
    start = 0
    for end in _sentence_ends(body):
        sentence = body[start:end]
        gap_end = end + (len(body[end:]) - len(body[end:].lstrip()))
        pieces.append(Piece(sentence, True))
        if gap_end > end:
            pieces.append(Piece(body[end:gap_end], False))
        start = gap_end
    if start < len(body):
        pieces.append(Piece(body[start:], True))
    if trail:
        pieces.append(Piece(trail, False))
    return pieces


def _sentence_ends(body: str) -> list[int]:
    """Offsets just past each sentence end inside a stripped line (the line's end excluded)."""
    inside = _inside_pairs(body)
    ends: list[int] = []
    index = 0
    while index < len(body):
        char = body[index]
        if _quotation_meets_quotation(body, index, inside):
            ends.append(index + 1)
        if inside[index] or not _terminates(body, index):
            index += 1
            continue
        end = index + 1
        while end < len(body) and (body[end] in CJK_TERMINATORS or body[end] in ASCII_TERMINATORS):
            end += 1
        while end < len(body) and body[end] in CLOSERS and not _opens_pair(body, end, inside):
            end += 1
        if end < len(body) and (char in CJK_TERMINATORS or _ends_ascii(body, end)):
            ends.append(end)
        index = end
    return ends


def _quotation_meets_quotation(body: str, index: int, inside: list[bool]) -> bool:
    """“还要咖啡吗？”“不了。”: a quotation that ends a sentence, then the next one opens."""
    return (
        not inside[index]
        and body[index] in CLOSERS
        and index > 0
        and (body[index - 1] in CJK_TERMINATORS or body[index - 1] in ASCII_TERMINATORS)
        and index + 1 < len(body)
        and body[index + 1] in QUOTE_OPENERS
    )


def _terminates(body: str, index: int) -> bool:
    char = body[index]
    if char in CJK_TERMINATORS:
        return True
    if char not in ASCII_TERMINATORS:
        return False
    if char == "." and index > 0 and body[index - 1].isdigit():
        following = body[index + 1 : index + 2]
        if following.isdigit():  # 3.5, 1.2.3
            return False
    if char == ".":
        word = re.search(r"[A-Za-z]+$", body[:index])
        # Mr. Smith, Dr. Li, J. K. Rowling: an abbreviation or an initial, not a sentence end.
        if word and (word.group() in ABBREVIATIONS or (len(word.group()) == 1 and word.group().isupper())):
            return False
    return True


def _ends_ascii(body: str, end: int) -> bool:
    """An ASCII terminator ends a sentence only before a space or a CJK character (not in 3.5, a.m.)."""
    following = body[end]
    if CJK.match(following):
        return True
    rest = body[end:].lstrip()
    # "e.g. the", "p. 3": a lower-case word or a number after the space continues the sentence.
    return following.isspace() and not (rest[:1].islower() or rest[:1].isdigit())


def _opens_pair(body: str, index: int, inside: list[bool]) -> bool:
    """A straight quote after a terminator may open the next quotation rather than close this one."""
    return body[index] in "\"'" and index + 1 < len(body) and inside[index + 1]


def _inside_pairs(body: str) -> list[bool]:
    """For each character: is it strictly inside a matched pair of quotes or brackets?"""
    depth_changes = [0] * (len(body) + 1)
    stack: list[tuple[str, int]] = []
    for index, char in enumerate(body):
        if stack and char == stack[-1][0]:
            _, opened = stack.pop()
            depth_changes[opened + 1] += 1
            depth_changes[index] -= 1
        elif char in PAIRS:
            stack.append((PAIRS[char], index))
        elif char == '"':  # straight double quotes pair with the next one
            stack.append(('"', index))
        elif char in PAIRS.values() and any(closer == char for closer, _ in stack):
            # A closer that does not match the innermost opener: drop the unmatched openers above it.
            while stack[-1][0] != char:
                stack.pop()
            if stack:
                _, opened = stack.pop()
                depth_changes[opened + 1] += 1
                depth_changes[index] -= 1
    inside: list[bool] = []
    depth = 0
    for index in range(len(body)):
        depth += depth_changes[index]
        inside.append(depth > 0)
    return inside


def _merge_gaps(pieces: list[Piece]) -> list[Piece]:
    """Adjacent gaps (a trailing space, the line break, the next indentation) become one."""
    merged: list[Piece] = []
    for piece in pieces:
        if merged and not piece.is_sentence and not merged[-1].is_sentence:
            merged[-1] = Piece(merged[-1].text + piece.text, False)
        else:
            merged.append(piece)
    return merged
