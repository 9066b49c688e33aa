"""A per-worker LRU cache of sentence translations, bounded by entries and by bytes.

The key is everything that decides the output: model version and variant, the decode options
after defaults (beams, token bounds) and the source token ids of one sentence (or one chunk of
an over-long one). Documents repeat themselves (headings, boilerplate, UI strings), and a hit
skips the model entirely.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

CacheKey = tuple[object, ...]

# What one entry costs besides its ids and text: the key tuple, the OrderedDict node, the str header.
ENTRY_OVERHEAD_BYTES = 200


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    hits: int
    misses: int


def cache_key(model: str, options: Sequence[object], ids: Sequence[int]) -> CacheKey:
    return (model, *options, tuple(ids))


def entry_bytes(key: CacheKey, translation: str) -> int:
    ids = key[-1]
    assert isinstance(ids, tuple)
    return ENTRY_OVERHEAD_BYTES + 8 * len(ids) + sys.getsizeof(translation)


class SentenceCache:
    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[CacheKey, tuple[str, int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: CacheKey) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: CacheKey, translation: str) -> None:
        size = entry_bytes(key, translation)
        if size > self.max_bytes or self.max_entries == 0:
            return
        if key in self._entries:
            self._bytes -= self._entries.pop(key)[1]
        self._entries[key] = (translation, size)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted

    def stats(self) -> CacheStats:
        return CacheStats(len(self._entries), self._bytes, self.hits, self.misses)
