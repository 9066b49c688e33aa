"""What a client asks: texts, their format and the decode options, already validated at the edge."""

from __future__ import annotations

from dataclasses import dataclass

from handlers.model.options import GenerationOptions
from handlers.text.documents import DocumentFormat


@dataclass(frozen=True)
class TranslationRequest:
    texts: tuple[str, ...]
    # True when the client sent a list of texts: the answer then carries a list too.
    as_list: bool
    options: GenerationOptions
    text_format: DocumentFormat = "text"  # docx, odt: the text is the file, as base64
    want_sentences: bool = False
    stream: bool = False
    glossary: tuple[tuple[str, str], ...] = ()  # (source term, target term), as sent
    # LibreTranslate's "alternatives" is a ceiling: at most beams - 1 come back, never a refusal.
    alternatives_at_most: bool = False
