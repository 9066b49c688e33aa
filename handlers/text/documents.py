"""A text (plain or HTML) as the model sees it, sentence by sentence, and the text it becomes.

plan_document() turns one client text into a Document: copied markup, and runs of text split
into sentences with their protected spans masked. Document.model_inputs are the sentences the
model must decode (those with a Han character); Document.render() takes their translations in
the same order and rebuilds the whole text: gaps, markup and protected spans exactly as sent.
Nothing here touches the model, so all of it is unit-tested with fake translations.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from handlers.text.glossary import NO_GLOSSARY, Glossary
from handlers.text.markup import html_segments
from handlers.text.protection import Masked, Protected, mask, protect, restore
from handlers.text.scripts import has_han
from handlers.text.splitting import Piece, join_sentences, split_text, unwrap_lines

TextFormat = Literal["text", "html"]
TEXT_FORMATS: tuple[TextFormat, ...] = get_args(TextFormat)


@dataclass(frozen=True)
class PlannedSentence:
    source: str  # the sentence as sent (protected spans in place)
    masked: Masked
    copy: str  # what the translation holds when the model is not called: glossary terms rendered

    @property
    def translatable(self) -> bool:
        return has_han(self.masked.core)


@dataclass(frozen=True)
class Run:
    """Text between pieces of copied markup (a plain text is one run)."""

    pieces: list[Piece]
    sentences: list[PlannedSentence]
    glossary_hits: int = 0  # source occurrences of glossary terms in this run


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
    model_inputs: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.model_inputs = [s.masked.core for s in self.sentences() if s.translatable]

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
                if sentence.translatable:
                    output = next(outputs)
                    # In HTML the model's "<" or "&" is text, never markup.
                    restored = restore(
                        sentence.masked, html.escape(output, quote=False) if self.html else output
                    )
                    dropped += restored.dropped
                    rendered.append((restored.text, True))
                else:
                    rendered.append((sentence.copy, False))
                pairs.append(SentencePair(sentence.source, *rendered[-1]))
            text.append(join_sentences(part.pieces, rendered))
        return Rendered("".join(text), pairs, dropped)


def plan_document(text: str, text_format: TextFormat = "text", glossary: Glossary = NO_GLOSSARY) -> Document:
    if text_format == "html":
        parts: list[str | Run] = [
            segment.raw if segment.protected is None else _run(segment.protected, html=True)
            for segment in html_segments(text, glossary)
        ]
        return Document(parts, html=True)
    return Document([_run(protect(text, into=Protected("", glossary=glossary)))], html=False)


def _run(protected: Protected, html: bool = False) -> Run:
    # HTML source is wrapped at will (a line break inside <p> is a space on screen): line breaks
    # split only plain text, and the model sees a wrapped HTML sentence on one line.
    pieces = split_text(protected.text, line_breaks=not html)
    sentences = []
    for piece in pieces:
        if piece.is_sentence:
            masked = mask(piece.text, protected)
            if html:
                masked = replace(masked, core=unwrap_lines(masked.core))
            sentences.append(
                PlannedSentence(protected.expand(piece.text), masked, protected.render(piece.text))
            )
    return Run(pieces, sentences, protected.glossary_hits)
