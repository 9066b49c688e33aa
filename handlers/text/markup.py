"""Cut an HTML fragment into what is copied byte for byte and what is translated.

The standard library's html.parser finds the tags (it follows the HTML5 tokenizer rules for
quoted attributes, comments and raw-text elements); each event's exact source text is cut from
the input by offset, so tags, attributes, comments and entities come back unchanged. Block tags
(p, div, li, h1, br, ...) end a run of text; inline tags (b, a, span, ...) and character
references stay inside the run as protected spans, so "<b>重要</b>的事情" is still one sentence.
The contents of script, style, pre, code, textarea and of any element marked translate="no" (or
class="notranslate") are copied, never translated.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

from handlers.errors import Unparsable
from handlers.text.budget import check
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.protection import Protected, protect

# fmt: off
INLINE = frozenset([
    "a", "abbr", "b", "bdi", "bdo", "cite", "data", "del", "dfn", "em", "font", "i", "ins", "kbd",
    "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "wbr",
])
VERBATIM = frozenset(["script", "style", "pre", "code", "textarea", "svg", "math", "template"])
VOID = frozenset([
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
])
# fmt: on


@dataclass(frozen=True)
class Segment:
    """Copied markup (protected is None) or a run of text with inline markup protected in it."""

    raw: str
    protected: Protected | None = None


def html_segments(html: str, glossary: Glossary = NO_GLOSSARY) -> list[Segment]:
    events = _Events(html)
    segments: list[Segment] = []
    run: Protected | None = None
    run_raw: list[str] = []

    def end_run() -> None:
        nonlocal run
        if run is not None:
            segments.append(Segment("".join(run_raw), run))
        run = None
        run_raw.clear()

    for kind, raw, tag, attrs in events.cut():
        check()
        block = kind == "tag" and tag.lstrip("/") not in INLINE
        copied = events.skipping or block or kind in ("comment", "decl", "pi")
        events.track(kind, tag, attrs)
        if copied:
            end_run()
            segments.append(Segment(raw))
            continue
        if run is None:
            run = Protected("", glossary=glossary)
        run_raw.append(raw)
        if kind == "text":
            protect(raw, html=True, into=run)
        else:  # an inline tag or a character reference: one protected span
            run.text += run.slot_for(raw)
    end_run()
    return segments


class _Events(HTMLParser):
    """Records (kind, start offset, tag, attrs) per parser event, and tracks verbatim elements."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=False)
        self.html = html
        self.events: list[tuple[str, int, str, list[tuple[str, str | None]]]] = []
        # getpos() counts lines by "\n" only (str.splitlines would also break at \r, \x0c, ...).
        self.line_offsets = [0] + [index + 1 for index, char in enumerate(html) if char == "\n"]
        self.verbatim: list[str] = []  # open elements whose content is copied

    @property
    def skipping(self) -> bool:
        return bool(self.verbatim)

    def cut(self) -> list[tuple[str, str, str, list[tuple[str, str | None]]]]:
        """Every event with its exact source text: from its offset to the next event's."""
        try:
            self.feed(self.html)
            self.close()
        except AssertionError as error:
            # Python 3.11's _markupbase asserts on some declarations ("<![a"): the client's markup,
            # not a bug of ours, so a 400 that says where, not a crash that loses the whole batch.
            line, column = self.getpos()
            raise Unparsable(f"not HTML: line {line}, column {column + 1}: {error}") from None
        starts = [offset for _, offset, _, _ in self.events] + [len(self.html)]
        return [
            (kind, self.html[start:end], tag, attrs)
            for (kind, start, tag, attrs), end in zip(self.events, starts[1:], strict=True)
            if end > start
        ]

    def track(self, kind: str, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Enter or leave a verbatim element (called in document order, after cut())."""
        if kind != "tag" or tag in VOID:
            return
        if tag.startswith("/"):
            if self.verbatim and self.verbatim[-1] == tag[1:]:
                self.verbatim.pop()
        elif self.verbatim or tag in VERBATIM or _no_translate(attrs):
            self.verbatim.append(tag)

    def _record(self, kind: str, tag: str = "", attrs: list[tuple[str, str | None]] | None = None) -> None:
        check()  # html.parser's loop calls back at every event: the budget holds inside it
        line, column = self.getpos()
        self.events.append((kind, self.line_offsets[line - 1] + column, tag, attrs or []))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record("tag", tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record("tag", tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        self._record("tag", "/" + tag)

    def handle_data(self, data: str) -> None:
        self._record("text")

    def handle_entityref(self, name: str) -> None:
        self._record("ref")

    def handle_charref(self, name: str) -> None:
        self._record("ref")

    def handle_comment(self, data: str) -> None:
        self._record("comment")

    def handle_decl(self, decl: str) -> None:
        self._record("decl")

    def unknown_decl(self, data: str) -> None:
        self._record("decl")

    def handle_pi(self, data: str) -> None:
        self._record("pi")


def _no_translate(attrs: list[tuple[str, str | None]]) -> bool:
    values = dict(attrs)
    return values.get("translate") == "no" or "notranslate" in (values.get("class") or "").split()
