"""Split a text into sentences and the exact whitespace between them, and put it back together.

opus-mt models were trained on sentence pairs: a paragraph decoded as one sequence is slower
(attention is quadratic) and worse. A text becomes a list of pieces whose concatenation is the
text, byte for byte: sentences, and "gaps" (line breaks, blank lines, indentation, the spaces
between sentences). Only sentences reach the model; gaps are copied.

Rules (the splitter study, bench/studies/README.md, measured them against pysbd and sentencex):
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

from handlers.text.budget import check, check_every

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
# A word longer than this is neither an abbreviation nor an initial: _terminates looks no further back.
_LONGEST_ABBREVIATION = max(map(len, ABBREVIATIONS))
_ASCII_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
LINE_BREAK = re.compile(r"\r\n|\n|\r|\u2028|\u2029")
# A run of whitespace that holds a line break. It may start only where whitespace starts: without
# the lookbehind, every position of a long run of spaces with no line break would be tried and each
# try would read to the run's end (quadratic). A match never started inside a run before either.
WRAPPED_LINE = re.compile(r"(?<!\s)\s*(?:\r\n|\n|\r|\u2028|\u2029)\s*")
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
        check()
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
        check()
        sentence = body[start:end]
        gap_end = _skip_spaces(body, end)
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
        check_every(index)
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
        word = _word_before(body, index)
        # Mr. Smith, Dr. Li, J. K. Rowling: an abbreviation or an initial, not a sentence end.
        if word in ABBREVIATIONS or (len(word) == 1 and word.isupper()):
            return False
    return True


def _word_before(body: str, index: int) -> str:
    """The ASCII letters that end body[:index] (as `[A-Za-z]+$` reads them: before a last "\\n" too),
    at most one longer than the longest abbreviation. Walking back a bounded window keeps a line of
    many "." after one long word linear; a search over body[:index] at every "." was quadratic."""
    end = index - 1 if index and body[index - 1] == "\n" else index
    start = end
    while start > max(end - _LONGEST_ABBREVIATION - 1, 0) and body[start - 1] in _ASCII_LETTERS:
        start -= 1
    return body[start:end]


def _skip_spaces(body: str, index: int) -> int:
    """The first offset at or after index that is not whitespace (len(body) if none)."""
    while index < len(body) and body[index].isspace():
        index += 1
    return index


def _ends_ascii(body: str, end: int) -> bool:
    """An ASCII terminator ends a sentence only before a space or a CJK character (not in 3.5, a.m.)."""
    following = body[end]
    if CJK.match(following):
        return True
    word = _skip_spaces(body, end)
    after = body[word : word + 1]
    # "e.g. the", "p. 3": a lower-case word or a number after the space continues the sentence.
    return following.isspace() and not (after.islower() or after.isdigit())


def _opens_pair(body: str, index: int, inside: list[bool]) -> bool:
    """A straight quote after a terminator may open the next quotation rather than close this one."""
    return body[index] in "\"'" and index + 1 < len(body) and inside[index + 1]


def _inside_pairs(body: str) -> list[bool]:
    """For each character: is it strictly inside a matched pair of quotes or brackets?"""
    depth_changes = [0] * (len(body) + 1)
    stack: list[tuple[str, int]] = []
    # How many of each closer the stack waits for: a closer that matches no opener is then known at
    # once, where scanning the stack for it was quadratic ("(" x 2,500 then "》" x 2,500).
    waiting = dict.fromkeys(_PAIR_CLOSERS, 0)
    for index, char in enumerate(body):
        check_every(index)
        if stack and char == stack[-1][0]:
            _, opened = _pop(stack, waiting)
            depth_changes[opened + 1] += 1
            depth_changes[index] -= 1
        elif char in PAIRS:
            _push(stack, waiting, PAIRS[char], index)
        elif char == '"':  # straight double quotes pair with the next one
            _push(stack, waiting, '"', index)
        elif char in _PAIR_CLOSERS and waiting[char]:
            # A closer that does not match the innermost opener: drop the unmatched openers above it.
            while stack[-1][0] != char:
                _pop(stack, waiting)
            if stack:
                _, opened = _pop(stack, waiting)
                depth_changes[opened + 1] += 1
                depth_changes[index] -= 1
    inside: list[bool] = []
    depth = 0
    for index in range(len(body)):
        depth += depth_changes[index]
        inside.append(depth > 0)
    return inside


_PAIR_CLOSERS = frozenset(PAIRS.values()) | {'"'}


def _push(stack: list[tuple[str, int]], waiting: dict[str, int], closer: str, index: int) -> None:
    stack.append((closer, index))
    waiting[closer] += 1


def _pop(stack: list[tuple[str, int]], waiting: dict[str, int]) -> tuple[str, int]:
    closer, opened = stack.pop()
    waiting[closer] -= 1
    return closer, opened


def _merge_gaps(pieces: list[Piece]) -> list[Piece]:
    """Adjacent gaps (a trailing space, the line break, the next indentation) become one."""
    merged: list[Piece] = []
    run: list[str] = []  # the gap texts being merged, joined once (adding them one by one was quadratic)
    for piece in pieces:
        if not piece.is_sentence and run:
            run.append(piece.text)
            continue
        if run:
            merged[-1] = Piece("".join(run), False)
            run = []
        merged.append(piece)
        if not piece.is_sentence:
            run = [piece.text]
    if run:
        merged[-1] = Piece("".join(run), False)
    return merged
