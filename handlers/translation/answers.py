"""What each text of a request became: the domain answer the wire edge turns into a body."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SentenceAnswer:
    source: str
    translation: str
    translated: bool  # False: copied unchanged (no Han character)
    cached: bool


@dataclass(frozen=True)
class CutSentence:
    """A sentence over the model's input limit, translated in parts."""

    tokens: int
    parts: int


@dataclass(frozen=True)
class TextAnswer:
    """One text of a request after translation."""

    translation: str
    sentences: list[SentenceAnswer]
    dropped: list[str]  # protected spans the model dropped, appended to their sentence
    cut: list[CutSentence]
    decoded: int  # sentences that went through the model (or its cache)
    cached: int  # of those, answered from the cache
    alternatives: list[str] | None = None  # None: not asked; []: none for this text (see warnings)
