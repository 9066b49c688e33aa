"""A sentence on its way through the model: the one record of what it is and what it became.

The model decodes chunks: a sentence over the model's input limit is cut into several
(handlers.model.long_sentences), any other is one. Each chunk keeps its token ids, its cache key,
and once answered its translation, whether the cache gave it, and its next-best translations.
Only handlers.translation.decoding fills chunks; everything else reads sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from handlers.sentence_cache import CacheKey
from handlers.translation.answers import CutSentence


@dataclass
class Chunk:
    ids: tuple[int, ...]
    key: CacheKey = ()  # set when the sentence is opened for decoding
    text: str | None = None  # its translation, once answered
    cached: bool = False  # answered by the sentence cache
    alternatives: tuple[str, ...] = ()  # next-best translations, when the request asks for them


@dataclass
class Sentence:
    chunks: list[Chunk] = field(default_factory=list)

    @classmethod
    def of(cls, chunk_ids: Sequence[Sequence[int]]) -> Sentence:
        return cls([Chunk(tuple(ids)) for ids in chunk_ids])

    @property
    def done(self) -> bool:
        return all(chunk.text is not None for chunk in self.chunks)

    @property
    def translation(self) -> str:
        """The chunks' translations joined (a cut sentence reads as one)."""
        return " ".join(chunk.text or "" for chunk in self.chunks)

    @property
    def cached(self) -> bool:
        return all(chunk.cached for chunk in self.chunks)

    @property
    def alternatives(self) -> list[str]:
        """Next-best translations: offered for a sentence decoded in one part only."""
        return list(self.chunks[0].alternatives) if len(self.chunks) == 1 else []

    @property
    def cut(self) -> CutSentence | None:
        if len(self.chunks) == 1:
            return None
        return CutSentence(sum(len(chunk.ids) for chunk in self.chunks), len(self.chunks))
