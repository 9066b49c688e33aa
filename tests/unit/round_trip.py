"""Helpers for the wrapped formats' tests (subtitles, Markdown): the identity render and fake models."""

from __future__ import annotations

import re

from handlers.text.documents import Document, TextFormat, plan_document
from handlers.text.scripts import HAN
from handlers.text.wrapping import Lines


def untranslated(document: Document) -> str:
    """The document with every sentence rendered as its own source: must be the text as sent."""
    return "".join(
        part
        if isinstance(part, str)
        else part.join([(sentence.source, False) for sentence in part.sentences])
        for part in document.parts
    )


def marked(inputs: list[str]) -> list[str]:
    """A model that wraps each sentence in EN(...) and keeps its tokens."""
    return [f"EN({text})" for text in inputs]


def english_words(inputs: list[str]) -> list[str]:
    """A model that turns each Han character into an English word and keeps everything else."""
    return [HAN.sub(" word ", text).replace("  ", " ").strip() for text in inputs]


def translated(text: str, text_format: TextFormat) -> str:
    document = plan_document(text, text_format)
    return document.render(english_words(document.model_inputs)).text


def skeleton(parts: list[str | Lines]) -> list[str]:
    """What a format copies: everything outside its translatable units."""
    return [part for part in parts if isinstance(part, str)]


def chinese_left(parts: list[str | Lines]) -> list[str]:
    """Units that still hold Chinese to translate."""
    return [
        part.protected.text for part in parts if isinstance(part, Lines) and HAN.search(part.protected.text)
    ]


def lines_of(text: str) -> int:
    return len(re.split(r"\r\n|\r|\n", text))
