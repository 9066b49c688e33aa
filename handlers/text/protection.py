"""Keep what must not be translated away from the model: URLs, e-mail, format placeholders, tags.

Two steps. protect() runs on a whole text before it is split into sentences: each protected
span becomes one private-use character, so a "." in a URL or a "！" in a tag attribute cannot end
a sentence. mask() then runs on one sentence: each such character becomes a short token (ZX1,
ZX2, ...) for the model, and restore() swaps the original text back after decoding.

Spans at the start or end of a sentence never reach the model at all (`<b>你好</b>` decodes
only 你好), so only spans inside a sentence rely on the model copying the token. A token the
model drops is not lost: its original text is appended to the translation and the response
carries a warning.

The token's shape is a guess at what opus-mt copies (a short Latin-and-digit code, like a
product name); it could not be checked on the real model here, which is why the fallback exists.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from handlers.errors import TooManyProtectedSpans
from handlers.text.budget import check
from handlers.text.glossary import NO_GLOSSARY, Glossary

# An e-mail address's local part (before the "@").
_LOCAL = r"A-Za-z0-9._%+\-"
# Order matters: the first alternative that matches at a position wins.
_PATTERNS = {
    "url": r"(?:https?|ftp)://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+|www\.[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"
    r"(?:/[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*)?",
    "email": rf"[{_LOCAL}]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+",
    "template": r"\{\{[^{}\n]{0,100}\}\}",
    "brace": r"\{[A-Za-z0-9_.:\-]{0,40}\}",
    "printf": r"%(?:\d+\$|\([A-Za-z_]\w{0,40}\))?[-+ #0]{0,3}\d{0,3}(?:\.\d{1,3})?[sdifuxXoeEgGc%]",
    "tag": r"</?[A-Za-z][A-Za-z0-9:\-]{0,40}(?:\s[^<>]{0,500})?/?>",
    # Text that already looks like one of our tokens is protected too, or restore() would mistake it.
    "token": r"(?<![A-Za-z0-9])[Zz][Xx]\s?\d+",
}
PROTECTED = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _PATTERNS.items()))
# Character references (&amp;, &#20320;) are protected in HTML only: in plain text they are text.
ENTITY = r"(?P<entity>&(?:[A-Za-z][A-Za-z0-9]{1,31}|#\d{1,7}|#[xX][0-9A-Fa-f]{1,6});)"
PROTECTED_HTML = re.compile(f"{ENTITY}|{PROTECTED.pattern}")
# The same patterns for scanning, with an e-mail address starting only where a local part can start.
# Scanning tries every position, and at each one inside a long run of local-part characters with no
# "@" after it the plain pattern read to the run's end (5,000 letters: 12.5M steps). _spans() shows
# why what the scan finds is exactly what the plain pattern finds.
_EMAIL_AT_RUN_START = rf"(?<![{_LOCAL}])"
_SCAN = {
    pattern: re.compile(pattern.pattern.replace("(?P<email>", f"(?P<email>{_EMAIL_AT_RUN_START}", 1))
    for pattern in (PROTECTED, PROTECTED_HTML)
}
_LOCAL_RUN = re.compile(rf"[{_LOCAL}]+")
# Punctuation that ends a sentence rather than a URL: "见 https://a.b/c。" or "(see https://a.b)".
_URL_TRAILING = ".,;:!?)]}'\""


# Protected spans stand in the text as private-use characters while it is split into sentences.
_FIRST_SLOT, _LAST_SLOT = 0xE000, 0xF8FF
MAX_PROTECTED_SPANS = _LAST_SLOT - _FIRST_SLOT + 1  # a slot per span: one private-use character each
SLOT = re.compile(f"[{chr(_FIRST_SLOT)}-{chr(_LAST_SLOT)}]")
_ALNUM = re.compile("[A-Za-z0-9]")
# restore(): where a token may stand in a translation ("ZX12", "zx 12"), and what may not stand
# right before one (as the IGNORECASE class reads it: also "K" and "ſ", which fold to ASCII).
_TOKEN_COPY = re.compile(r"ZX\s?([0-9]++)", re.IGNORECASE)
_LETTER_OR_DIGIT = re.compile("[A-Za-z0-9]", re.IGNORECASE)
_PLACED = re.compile("\0([0-9]+)\0")


def token(number: int) -> str:
    return f"ZX{number}"  # restore() matches this shape


@dataclass
class Protected:
    """A text with each protected span replaced by one private-use character (a slot).

    A span comes back in the translation as itself, except a glossary term, which comes back as
    its target term (renderings); the source side (expand) always shows what was sent.
    """

    text: str
    spans: list[str] = field(default_factory=list)
    renderings: list[str] = field(default_factory=list)
    glossary: Glossary = NO_GLOSSARY
    terms: set[str] = field(default_factory=set)  # the slots that stand for glossary terms

    @property
    def glossary_hits(self) -> int:
        return len(self.terms)

    def slot_for(self, span: str, rendering: str | None = None) -> str:
        """A new slot for span; a rendering (a glossary term's target) makes it a term's slot."""
        if len(self.spans) >= MAX_PROTECTED_SPANS:
            raise TooManyProtectedSpans(f"more than {MAX_PROTECTED_SPANS} protected spans in one text")
        self.spans.append(span)
        self.renderings.append(span if rendering is None else rendering)
        slot = chr(_FIRST_SLOT + len(self.spans) - 1)
        if rendering is not None:
            self.terms.add(slot)
        return slot

    def leaves_sentence(self, character: str) -> bool:
        """Whitespace and protected spans at a sentence's ends stay out of the model; a glossary term
        stays in as a token, so the model places it in the English word order."""
        return character.isspace() or (SLOT.match(character) is not None and character not in self.terms)

    def expand(self, text: str) -> str:
        """Slots back to their original text."""
        return SLOT.sub(lambda match: self.spans[ord(match.group()) - _FIRST_SLOT], text)

    def render(self, text: str) -> str:
        """Slots to what they become in a translation (a glossary term: its target term)."""
        return SLOT.sub(lambda match: self.renderings[ord(match.group()) - _FIRST_SLOT], text)


@dataclass(frozen=True)
class Masked:
    """One sentence as the model sees it.

    core is what the model decodes (empty when nothing translatable is left); prefix and suffix
    are the protected text around it as the translation carries it (a glossary term as its target
    term); spans[n - 1] is what token(n) becomes in the translation.
    """

    prefix: str
    core: str
    suffix: str
    spans: tuple[str, ...]


@dataclass(frozen=True)
class Restored:
    text: str
    # Protected spans the model's output did not carry; they were appended so nothing is lost.
    dropped: tuple[str, ...]


def protect(text: str, html: bool = False, into: Protected | None = None) -> Protected:
    """Swap every protected span of a plain text for a slot (private-use characters count as spans),
    then every glossary term (into.glossary) in the text between them."""
    protected = into if into is not None else Protected("")
    pattern = PROTECTED_HTML if html else PROTECTED
    out: list[str] = []
    position = 0
    for match in _spans(pattern, text):
        check()
        span = match.group()
        if match.lastgroup == "url":
            span = span.rstrip(_URL_TRAILING)
        if not span:
            continue
        out.append(_protect_slots(text[position : match.start()], protected))
        out.append(protected.slot_for(span))
        position = match.start() + len(span)
    out.append(_protect_slots(text[position:], protected))
    protected.text += "".join(out)
    return protected


def _spans(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """pattern.finditer(text), in linear time.

    The scan pattern differs from `pattern` only where an e-mail address would start right after a
    local-part character. finditer never gets to such a position but one way: where the previous
    match ended (the position before it was tried, and there the address, one character longer,
    matched too). So at each such restart `pattern` itself is tried first, when an "@" ends the
    local-part run it starts in (else no address can start there), and the scan goes on from there.
    """
    scan = _SCAN[pattern]
    runs = [match.span() for match in _LOCAL_RUN.finditer(text)]
    starts = [start for start, _ in runs]
    position = 0
    while position < len(text):
        match = None
        if position and _LOCAL_RUN.match(text, position - 1, position):
            run = runs[bisect.bisect_right(starts, position - 1) - 1]
            if run[1] > position and text[run[1] : run[1] + 1] == "@":
                match = pattern.match(text, position)
        match = match or scan.search(text, position)
        if match is None:
            return
        yield match
        position = max(match.end(), position + 1)  # no alternative matches the empty string


def mask(sentence: str, protected: Protected) -> Masked:
    """Slots at either end (and the whitespace there) leave the sentence, glossary terms excepted;
    inner slots become tokens."""
    stripped = sentence.strip()
    lead = len(sentence) - len(sentence.lstrip())
    start, end = lead, lead + len(stripped)
    while start < end and protected.leaves_sentence(sentence[start]):
        start += 1
    while end > start and protected.leaves_sentence(sentence[end - 1]):
        end -= 1
    spans: list[str] = []

    def to_token(match: re.Match[str]) -> str:
        spans.append(protected.render(match.group()))
        # A token glued to a Latin letter or digit ("1ZX12") would change its number or its word.
        before, after = (
            match.string[match.start() - 1 : match.start()],
            match.string[match.end() : match.end() + 1],
        )
        return f"{' ' if _ALNUM.match(before) else ''}{token(len(spans))}{' ' if _ALNUM.match(after) else ''}"

    core = SLOT.sub(to_token, sentence[start:end])
    return Masked(protected.render(sentence[:start]), core, protected.render(sentence[end:]), tuple(spans))


def restore(masked: Masked, translation: str) -> Restored:
    """The translation with every token swapped back; a token the model dropped is appended.

    The model may space or re-case the token ("ZX 1", "zx1"); for each number in turn the first copy
    wins (it becomes "\\0n\\0", then its span) and the extras go. A token counts only where no
    Latin letter or digit stands right before it in the text as it is at that turn.
    """
    text, dropped = _tokens_placed(translation, len(masked.spans))
    dropped_spans = [masked.spans[number - 1] for number in dropped]
    if "\0" in translation or any("\0" in span for span in masked.spans):
        # A NUL of the client's or the model's may make or meet a "\0n\0": swap one number at a
        # time, each over the whole text, as ever (quadratic, but only for texts holding a NUL).
        for number, span in enumerate(masked.spans, start=1):
            if number % 64 == 0:
                check()
            text = text.replace(f"\0{number}\0", span)
    else:  # the only "\0n\0" are those placed above: all swapped in one pass
        text = _PLACED.sub(lambda match: masked.spans[int(match.group(1)) - 1], text)
    if dropped_spans:
        text = f"{text} {' '.join(dropped_spans)}".strip()
    return Restored(f"{masked.prefix}{text}{masked.suffix}", tuple(dropped_spans))


def _tokens_placed(translation: str, count: int) -> tuple[str, list[int]]:
    """The translation with token n's first copy as "\\0n\\0" and its other copies gone, for n = 1 to
    count, in that order; and the numbers not found.

    It gives what a search and a sub per number over the whole text gave, in one pass over the
    text: that was quadratic (thousands of tokens in one sentence took seconds). A number's copies
    are the places "zx" + an optional space + exactly its digits stand; only whether a copy counts
    can change from one turn to the next: it starts to count when the copy right before it, touching
    it ("ZX1ZX2"), is placed or removed, since what then stands before it is "\\0" or what stood
    before that copy (which counted, so it is no letter or digit).
    """
    copies = [
        (match.start(), match.end(), match.group(1))
        for match in _TOKEN_COPY.finditer(translation)
        if match.group(1)[0] != "0"  # "ZX01" is no token's copy
    ]
    counts = [start == 0 or _LETTER_OR_DIGIT.match(translation, start - 1) is None for start, _, _ in copies]
    by_number: dict[int, list[int]] = {}
    for index, (_, _, digits) in enumerate(copies):
        if len(digits) <= len(str(count)):
            by_number.setdefault(int(digits), []).append(index)
    placed: dict[int, int] = {}  # copy index -> its number
    removed: set[int] = set()
    dropped: list[int] = []

    def take(index: int) -> None:
        removed.add(index)
        after = index + 1
        if after < len(copies) and copies[after][0] == copies[index][1]:
            counts[after] = True

    for number in range(1, count + 1):
        if number % 64 == 0:
            check()
        indices = by_number.get(number, [])
        first = next((index for index in indices if counts[index]), None)
        if first is None:
            dropped.append(number)
            continue
        # The copy right after the placed one is read after "\0" by the sub: it counts there too.
        follower = first + 1
        if follower < len(copies) and copies[follower][0] == copies[first][1]:
            counts[follower] = True
        extras = [index for index in indices if index != first and counts[index]]
        placed[first] = number
        take(first)
        for index in extras:
            take(index)
    out: list[str] = []
    position = 0
    for index, (start, end, _) in enumerate(copies):
        if index in removed:
            out.append(translation[position:start])
            if index in placed:
                out.append(f"\0{placed[index]}\0")
            position = end
    out.append(translation[position:])
    return "".join(out), dropped


def _protect_slots(text: str, protected: Protected) -> str:
    """Private-use characters already in the input are protected as themselves, never confused with
    slots; then each glossary term becomes a slot that renders as its target term."""
    text = SLOT.sub(lambda match: protected.slot_for(match.group()), text)
    if not protected.glossary:
        return text
    out: list[str] = []
    position = 0
    for match in protected.glossary.matches(text):
        check()
        out.append(text[position : match.start()])
        out.append(protected.slot_for(match.group(), protected.glossary.terms[match.group()]))
        position = match.end()
    out.append(text[position:])
    return "".join(out)
