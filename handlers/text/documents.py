"""A text (plain, HTML, SRT, WebVTT or Markdown) as the model sees it, sentence by sentence, and the
text it becomes.

plan_document() turns one client text into a Document: copied markup, and runs of text split
into sentences with their protected spans masked. Each format cuts its own markup (markup.py for
HTML, subtitles.py, markdown.py); subtitle cues and Markdown blocks are runs whose line breaks the
model does not see and render() puts back (wrapping.py). Document.model_inputs are the sentences
the model must decode (those with a Han character); Document.render() takes their translations in
the same order and rebuilds the whole text: gaps, markup and protected spans exactly as sent.
Nothing here touches the model, so all of it is unit-tested with fake translations.
"""

from __future__ import annotations

import base64
import binascii
import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from handlers.errors import Unparsable
from handlers.text.budget import check
from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.markdown import markdown_parts
from handlers.text.markup import html_segments
from handlers.text.office import OfficeFormat, OfficeText, read_office
from handlers.text.protection import Masked, Protected, mask, protect, restore
from handlers.text.scripts import has_han
from handlers.text.splitting import Piece, join_sentences, split_text, unwrap_lines
from handlers.text.subtitles import subtitle_parts
from handlers.text.wrapping import Lines, put_back, wrap

TextFormat = Literal["text", "html", "srt", "vtt", "markdown"]
TEXT_FORMATS: tuple[TextFormat, ...] = get_args(TextFormat)
# Files that are packages, sent as base64: their paragraphs go through the HTML path (office.py).
DocumentFormat = Literal["text", "html", "srt", "vtt", "markdown", "docx", "odt"]
DOCUMENT_FORMATS: tuple[DocumentFormat, ...] = get_args(DocumentFormat)
OFFICE_FORMATS: tuple[OfficeFormat, ...] = get_args(OfficeFormat)


@dataclass(frozen=True)
class PlannedSentence:
    source: str  # the sentence as sent (protected spans in place)
    masked: Masked
    copy: str  # what the translation holds when the model is not called: glossary terms rendered
    wrapped_breaks: int = 0  # line breaks inside what the model decodes, which it saw as spaces

    @property
    def translatable(self) -> bool:
        return has_han(self.masked.core)


@dataclass(frozen=True)
class Run:
    """Text between pieces of copied markup (a plain text is one run)."""

    pieces: list[Piece]
    sentences: list[PlannedSentence]
    glossary_hits: int = 0  # source occurrences of glossary terms in this run
    # A wrapped format's run (a cue, a Markdown block): what stood at each "\n" of the source,
    # put back in the rendered text; a translation is cut into as many lines as its source.
    line_breaks: tuple[str, ...] | None = None

    def join(self, rendered: list[tuple[str, bool]]) -> str:
        """Gaps and sentences (text, translated) back together; each piece gets its own line breaks."""
        if self.line_breaks is None:
            return join_sentences(self.pieces, rendered)
        sentences = iter(rendered)
        pieces: list[Piece] = []
        texts: list[tuple[str, bool]] = []
        used = 0
        for piece in self.pieces:
            own = self.line_breaks[used : used + piece.text.count("\n")]
            used += len(own)
            if piece.is_sentence:
                text, translated = next(sentences)
                texts.append((put_back(text, own), translated))
                pieces.append(piece)
            else:
                pieces.append(Piece(put_back(piece.text, own), False))
        return join_sentences(pieces, texts)


@dataclass(frozen=True)
class SentencePair:
    source: str
    translation: str
    translated: bool


@dataclass(frozen=True)
class Rendered:
    text: str
    pairs: list[SentencePair]
    # Protected spans the model dropped, appended to their sentence's translation.
    dropped: list[str]


@dataclass
class Document:
    parts: list[str | Run]
    html: bool
    # A .docx or .odt: `parts` are its paragraphs as HTML, and render() answers the file, as base64.
    office: OfficeText | None = None
    model_inputs: list[str] = field(init=False)
    _translatable: list[PlannedSentence] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Kept once: a stream restores its sentences one by one (restored()), by index.
        self._translatable = [s for s in self.sentences() if s.translatable]
        self.model_inputs = [s.masked.core for s in self._translatable]

    def sentences(self) -> Iterator[PlannedSentence]:
        for part in self.parts:
            if isinstance(part, Run):
                yield from part.sentences

    @property
    def translated(self) -> bool:
        return bool(self.model_inputs)

    @property
    def glossary_hits(self) -> int:
        return sum(part.glossary_hits for part in self.parts if isinstance(part, Run))

    def restored(self, index: int, translation: str) -> str:
        """Model input `index`'s translation as render() puts it in the text (protected spans and
        glossary terms back, HTML-escaped where the format is), on one line: a streamed sentence."""
        sentence = self._translatable[index]
        return restore(
            sentence.masked, html.escape(translation, quote=False) if self.html else translation
        ).text

    def render(self, translations: Sequence[str]) -> Rendered:
        """The whole text with each translatable sentence replaced by its translation, in order."""
        if len(translations) != len(self.model_inputs):
            raise ValueError(f"{len(self.model_inputs)} sentences to render, got {len(translations)}")
        outputs = iter(translations)
        pairs: list[SentencePair] = []
        dropped: list[str] = []
        text: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                text.append(part)
                continue
            rendered: list[tuple[str, bool]] = []
            for sentence in part.sentences:
                check()
                if sentence.translatable:
                    output = next(outputs)
                    if part.line_breaks is not None:
                        output = wrap(output, sentence.wrapped_breaks, sentence.masked.spans)
                    # In HTML the model's "<" or "&" is text, never markup.
                    restored = restore(
                        sentence.masked, html.escape(output, quote=False) if self.html else output
                    )
                    dropped += restored.dropped
                    rendered.append((restored.text, True))
                else:
                    rendered.append((sentence.copy, False))
                pairs.append(SentencePair(sentence.source, *rendered[-1]))
            text.append(part.join(rendered))
        whole = "".join(text)
        if self.office is not None:
            whole = base64.b64encode(self.office.rebuild(whole)).decode("ascii")
        return Rendered(whole, pairs, dropped)


def plan_document(
    text: str, text_format: DocumentFormat = "text", glossary: Glossary = NO_GLOSSARY
) -> Document:
    if text_format == "docx" or text_format == "odt":
        office = read_office(_file_bytes(text, text_format), text_format)
        return replace(plan_document(office.html, "html", glossary), office=office)
    if text_format == "html":
        parts: list[str | Run] = [
            segment.raw if segment.protected is None else _run(segment.protected, wrapped=True)
            for segment in html_segments(text, glossary)
        ]
        return Document(parts, html=True)
    if text_format == "markdown":
        return _wrapped(markdown_parts(text, glossary), html=False)
    if text_format == "srt" or text_format == "vtt":
        # WebVTT cue text escapes like HTML ("&lt;"); SRT takes the model's text as it is.
        return _wrapped(subtitle_parts(text, text_format, glossary), html=text_format == "vtt")
    return Document([_run(protect(text, into=Protected("", glossary=glossary)))], html=False)


def _file_bytes(text: str, text_format: OfficeFormat) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:  # ValueError: a character outside ASCII
        raise Unparsable(f'a {text_format} file travels as base64 in "text": {error}') from None


def _wrapped(parts: list[str | Lines], html: bool) -> Document:
    return Document(
        [
            part
            if isinstance(part, str)
            else _run(part.protected, wrapped=True, line_breaks=part.line_breaks)
            for part in parts
        ],
        html=html,
    )


def _run(protected: Protected, wrapped: bool = False, line_breaks: tuple[str, ...] | None = None) -> Run:
    # HTML source is wrapped at will (a line break inside <p> is a space on screen), and so are
    # subtitle cues and Markdown blocks: line breaks split only plain text, and the model sees a
    # wrapped sentence on one line.
    pieces = split_text(protected.text, line_breaks=not wrapped)
    sentences = []
    for piece in pieces:
        check()
        if piece.is_sentence:
            masked = mask(piece.text, protected)
            breaks = 0
            if wrapped:
                breaks = masked.core.count("\n")
                masked = replace(masked, core=unwrap_lines(masked.core))
            sentences.append(
                PlannedSentence(protected.expand(piece.text), masked, protected.render(piece.text), breaks)
            )
    return Run(pieces, sentences, protected.glossary_hits, line_breaks)
