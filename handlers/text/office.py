"""Word (.docx) and OpenDocument text (.odt) files: their paragraphs as an HTML fragment that the
pipeline translates as any HTML, and the file rebuilt around the translation.

Only text changes. Every other entry of the package is copied as it was, and in the main part
(word/document.xml, content.xml) every tag stays where it was: headings, tables, lists, styles and
run formatting survive. Each paragraph (w:p; text:p, text:h) with Chinese in it becomes one
`<p id=N>`. Within it, text nodes in a row that share their formatting (a docx run's w:rPr; the
text:span elements open around an odt node) make one piece. The paragraph's first piece sets its
base formatting: pieces with the base formatting are plain text in the <p>, the others
`<span id=N>` (the HTML path keeps inline tags as protected spans inside a sentence, so a bold word
stays bold wherever the model puts it). On the way back each piece's translation goes into its
first text node and its other nodes are emptied; plain text goes to the base pieces in order (all of
it to the first, if the model changed how many there are).

Bounded: at most MAX_ENTRIES entries, MAX_MAIN_PART_BYTES of main part and MAX_INFLATED_BYTES in
all, inflated (each read with a cap, so a zip bomb stops there), one linear pass over at most
MAX_TAGS of the main part's tags, one over the translation; a paragraph whose formatting changes
more often than a text may hold protected spans is refused before its HTML is built.
"""

from __future__ import annotations

import html
import io
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Literal

from handlers.errors import OverLimit, TooManyProtectedSpans, Unparsable
from handlers.text.budget import check
from handlers.text.protection import MAX_PROTECTED_SPANS
from handlers.text.scripts import has_han

OfficeFormat = Literal["docx", "odt"]
MAX_ENTRIES = 1000
# What zipfile raises on a damaged package, besides its own BadZipFile: a corrupt deflate stream,
# a header that points past the end, a method it lacks, an encrypted entry.
DAMAGED = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    OverflowError,
    NotImplementedError,
    RuntimeError,
    KeyError,
)
MAX_INFLATED_BYTES = 32 * 1024 * 1024
MAIN_PART = {"docx": "word/document.xml", "odt": "content.xml"}
ODT_MIMETYPE = b"application/vnd.oasis.opendocument.text"
MAX_MAIN_PART_BYTES = 4 * 1024 * 1024  # a 128 KiB upload inflates to less
# Short tags pack 550,000 into 4 MiB: reading them and their HTML took 3.9 s (found by make fuzz). A
# Word page holds a few hundred; 200,000 is a document of well over a hundred pages, read in under 1 s.
MAX_TAGS = 200_000
# A tag: "<", an optional "/", its name if it has one (not <?xml or <!--), then anything up to ">".
# Each part is one class the next cannot match the start of: linear, whatever the input.
TAG = re.compile(r"<(/?)([A-Za-z_][\w.:-]*)?[^<>]*>")
XML_ENTITIES = {"&lt;": "<", "&gt;": ">", "&amp;": "&", "&quot;": '"', "&apos;": "'"}
REFERENCE = re.compile(r"&(?:lt|gt|amp|quot|apos|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")


@dataclass
class _Node:
    """A text node of the main part: where it is, and the start tag of its docx w:t."""

    start: int
    end: int
    text: str
    tag_start: int | None = None  # docx: where its w:t start tag begins (its ">" is at start - 1)


@dataclass
class _Piece:
    nodes: list[_Node]
    formatting: str

    @property
    def text(self) -> str:
        return "".join(node.text for node in self.nodes)


@dataclass
class _Paragraph:
    pieces: list[_Piece] = field(default_factory=list)
    first_id: int = 0  # the id of its first piece in the HTML (ids run on across paragraphs)

    def add(self, node: _Node, formatting: str) -> None:
        if self.pieces and self.pieces[-1].formatting == formatting:
            self.pieces[-1].nodes.append(node)
        else:
            self.pieces.append(_Piece([node], formatting))

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self.pieces)


@dataclass(frozen=True)
class OfficeText:
    """A package as HTML to translate (`html`), and what rebuild() needs to write it back."""

    kind: OfficeFormat
    html: str
    characters: int  # of text in the paragraphs translated: what a request's limits count
    _package: bytes
    _xml: str
    _paragraphs: tuple[_Paragraph, ...]  # those in `html`, by their id

    def rebuild(self, translated_html: str) -> bytes:
        """The package with each paragraph's text replaced by its translation in `translated_html`."""
        texts = _Translated(len(self._paragraphs)).read(translated_html)
        replacements: dict[int, str] = {}
        for number, paragraph in enumerate(self._paragraphs):
            for piece, text in zip(paragraph.pieces, _assign(paragraph, texts[number]), strict=True):
                for index, node in enumerate(piece.nodes):
                    replacements[id(node)] = text if index == 0 else ""
        xml = self._written(replacements)
        return _repackaged(self._package, MAIN_PART[self.kind], xml.encode("utf-8"))

    def _written(self, replacements: dict[int, str]) -> str:
        out: list[str] = []
        at = 0
        # In document order: a paragraph nested in another (a note, a text box) ends first.
        nodes = sorted((n for p in self._paragraphs for piece in p.pieces for n in piece.nodes), key=_start)
        for node in nodes:
            check()
            tag_end = node.start - 1
            if (
                node.tag_start is not None
                and 'xml:space="preserve"' not in self._xml[node.tag_start : tag_end]
            ):
                # Word drops a w:t's leading and trailing spaces without it.
                out.append(self._xml[at:tag_end] + ' xml:space="preserve"')
                at = tag_end
            out.append(self._xml[at : node.start])
            out.append(_xml_escape(replacements[id(node)]))
            at = node.end
        out.append(self._xml[at:])
        return "".join(out)


def read_office(data: bytes, kind: OfficeFormat) -> OfficeText:
    """`data` (a .docx or .odt file) as HTML to translate; raises Unparsable or OverLimit."""
    xml = _main_part(data, kind)
    paragraphs = list(_docx_paragraphs(xml) if kind == "docx" else _odt_paragraphs(xml))
    translated = tuple(p for p in paragraphs if has_han(p.text))
    parts: list[str] = []
    piece_id = 0
    for number, paragraph in enumerate(translated):
        check()
        base = paragraph.pieces[0].formatting
        spans = sum(piece.formatting != base for piece in paragraph.pieces)
        if spans > MAX_PROTECTED_SPANS:  # the HTML path would refuse it, after building it all
            raise TooManyProtectedSpans(
                f"paragraph {number} changes its formatting {spans} times: more than "
                f"{MAX_PROTECTED_SPANS} protected spans in one text"
            )
        paragraph.first_id = piece_id
        parts.append(f"<p id={number}>")
        for piece in paragraph.pieces:
            text = html.escape(piece.text, quote=False)
            parts.append(text if piece.formatting == base else f"<span id={piece_id}>{text}</span>")
            piece_id += 1
        parts.append("</p>\n")
    characters = sum(len(p.text) for p in translated)
    return OfficeText(kind, "".join(parts), characters, data, xml, translated)


def _main_part(data: bytes, kind: OfficeFormat) -> str:
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except DAMAGED as error:
        raise Unparsable(f"not a .{kind} file: {error}") from None
    entries = package.infolist()
    if len(entries) > MAX_ENTRIES:
        raise OverLimit(f"a .{kind} of {len(entries)} entries > {MAX_ENTRIES}")
    names = {entry.filename for entry in entries}
    if MAIN_PART[kind] not in names or (kind == "docx") != ("[Content_Types].xml" in names):
        raise Unparsable(f"not a .{kind} file: it has no {MAIN_PART[kind]}")
    if kind == "odt" and _read(package, "mimetype", len(ODT_MIMETYPE)) != ODT_MIMETYPE:
        raise Unparsable("not an .odt file: its mimetype is not OpenDocument text")
    raw = _read(package, MAIN_PART[kind], MAX_MAIN_PART_BYTES)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Unparsable(f"{MAIN_PART[kind]} is not UTF-8") from None


def _read(package: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """An entry inflated, refused past `limit` bytes whatever its header claims."""
    try:
        with package.open(name) as entry:
            data = entry.read(limit + 1)
    except DAMAGED as error:
        raise Unparsable(f"cannot read {name}: {error}") from None
    if len(data) > limit:
        raise OverLimit(f"{name} inflates to over {limit} bytes")
    return data


def _repackaged(original: bytes, main: str, xml: bytes) -> bytes:
    """The package again, entries in their order and compression, `main` replaced. ODF wants its
    mimetype first and stored, which copying the order and compression keeps."""
    out = io.BytesIO()
    inflated = 0
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(out, "w") as target:
        for entry in source.infolist():
            check()
            data = (
                xml
                if entry.filename == main
                else _read(source, entry.filename, MAX_INFLATED_BYTES - inflated)
            )
            inflated += len(data)
            target.writestr(entry, data, compress_type=entry.compress_type)
    return out.getvalue()


def _tags(xml: str) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, name, kind) of each tag; kind is "open", "close", "empty" or "other"."""
    for count, match in enumerate(TAG.finditer(xml)):
        check()
        if count == MAX_TAGS:
            raise OverLimit(f"the file's text has more than {MAX_TAGS} tags; send it in parts")
        slash, name = match.groups()
        start, end = match.span()
        if name is None:
            yield start, end, "", "other"  # <?xml ...?>, <!-- -->, <![CDATA[
        else:
            yield start, end, name, "close" if slash else "empty" if xml[end - 2] == "/" else "open"


def _docx_paragraphs(xml: str) -> Iterator[_Paragraph]:
    """w:p paragraphs; their text is in the w:t of their runs, formatted by each run's w:rPr."""
    stack: list[_Paragraph] = []
    formatting, props_start, tag_start, text_start = "", -1, -1, -1
    for start, end, name, kind in _tags(xml):
        if name == "w:p" and kind == "open":
            stack.append(_Paragraph())
        elif name == "w:p" and kind == "close" and stack:
            yield stack.pop()
        elif name == "w:r" and kind in ("open", "empty"):
            formatting = ""
        elif name == "w:rPr" and kind == "open":
            props_start = start
        elif name == "w:rPr" and kind == "close" and props_start >= 0:
            formatting, props_start = xml[props_start:end], -1
        elif name == "w:t" and kind == "open":
            tag_start, text_start = start, end
        elif name == "w:t" and kind == "close" and text_start >= 0 and stack:
            node = _Node(text_start, start, _xml_unescape(xml[text_start:start]), tag_start=tag_start)
            stack[-1].add(node, formatting)
            text_start = -1


def _odt_paragraphs(xml: str) -> Iterator[_Paragraph]:
    """text:p and text:h paragraphs; their text is every text node inside, formatted by the
    text:span elements open around it."""
    stack: list[tuple[_Paragraph, list[str]]] = []  # a paragraph and its open spans
    previous_end = 0
    for start, end, name, kind in _tags(xml):
        if stack and start > previous_end:
            paragraph, spans = stack[-1]
            node = _Node(previous_end, start, _xml_unescape(xml[previous_end:start]))
            paragraph.add(node, "".join(spans))
        previous_end = end
        if name in ("text:p", "text:h") and kind == "open":
            stack.append((_Paragraph(), []))
        elif name in ("text:p", "text:h") and kind == "close" and stack:
            yield stack.pop()[0]
        elif name == "text:span" and stack:
            spans = stack[-1][1]
            if kind == "open":
                spans.append(xml[start:end])
            elif kind == "close" and spans:
                spans.pop()


def _xml_unescape(text: str) -> str:
    return REFERENCE.sub(_entity, text)


def _entity(match: re.Match[str]) -> str:
    reference = match.group()
    if reference in XML_ENTITIES:
        return XML_ENTITIES[reference]
    number = int(reference[3:-1], 16) if reference[2] == "x" else int(reference[2:-1])
    return chr(number) if 0 < number <= 0x10FFFF and not 0xD800 <= number <= 0xDFFF else reference


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Translated(HTMLParser):
    """The translated fragment's text per paragraph: [(span id or None, text), ...] in order."""

    def __init__(self, paragraphs: int) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[list[tuple[int | None, str]]] = [[] for _ in range(paragraphs)]
        self._paragraph: int | None = None
        self._span: int | None = None

    def read(self, fragment: str) -> list[list[tuple[int | None, str]]]:
        self.feed(fragment)
        self.close()
        return self.texts

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        number = _number(dict(attrs).get("id"))
        if tag == "p" and number is not None and number < len(self.texts):
            self._paragraph, self._span = number, None
        elif tag == "span":
            self._span = number

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._span = None
        elif tag == "p":
            self._paragraph = None

    def handle_data(self, data: str) -> None:
        check()
        if self._paragraph is not None:
            self.texts[self._paragraph].append((self._span, data))


def _number(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and len(value) < 10 else None


def _assign(paragraph: _Paragraph, texts: list[tuple[int | None, str]]) -> list[str]:
    """Each piece's new text, from the translated paragraph's (span id, text) in order."""
    base = paragraph.pieces[0].formatting
    spanned = {
        paragraph.first_id + n: "" for n, piece in enumerate(paragraph.pieces) if piece.formatting != base
    }
    plain: list[str] = []
    after_plain = False  # the parser may cut one stretch of plain text in several
    for span, text in texts:
        if span in spanned:
            spanned[span] += text
            after_plain = False
        elif after_plain:
            plain[-1] += text
        else:
            plain.append(text)
            after_plain = True
    bases = sum(1 for piece in paragraph.pieces if piece.formatting == base)
    if len(plain) != bases:  # the model moved plain text across a span: all of it to the first
        plain = ["".join(plain)] + [""] * (bases - 1)
    plain_texts = iter(plain)
    return [
        next(plain_texts) if piece.formatting == base else spanned[paragraph.first_id + n]
        for n, piece in enumerate(paragraph.pieces)
    ]


def _start(node: _Node) -> int:
    return node.start
