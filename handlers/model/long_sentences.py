"""Fit a sentence that is over the model's token limit: cut at clause breaks, else by tokens.

Nothing is truncated: every token of the sentence is decoded in some chunk, and the chunks'
translations are joined. Clause breaks (，、；： and their ASCII forms) keep the chunks
meaningful; only a single clause over the limit is cut by token count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

Encode = Callable[[Sequence[str]], list[list[int]]]

# After a clause-ending comma, enumeration comma, semicolon or colon.
CLAUSE_BREAK = re.compile(r"(?<=[，、；：,;:])")


def fit(text: str, ids: list[int], encode: Encode, limit: int) -> list[list[int]]:
    """Token-id chunks of at most `limit` ids each (ids is text encoded, ending with eos)."""
    if len(ids) <= limit:
        return [ids]
    chunks: list[list[int]] = []
    for clause_text in _pack_clauses(text, encode, limit):
        chunks += _cut_tokens(encode([clause_text])[0], limit)
    return chunks


def _pack_clauses(text: str, encode: Encode, limit: int) -> list[str]:
    """Consecutive clauses joined while they fit; a clause over the limit stays alone."""
    packed: list[str] = []
    current = ""
    for clause in (part for part in CLAUSE_BREAK.split(text) if part):
        candidate = current + clause
        if not current or len(encode([candidate])[0]) <= limit:
            current = candidate
        else:
            packed.append(current)
            current = clause
    if current:
        packed.append(current)
    return packed


def _cut_tokens(ids: list[int], limit: int) -> list[list[int]]:
    """Consecutive slices of limit - 1 tokens, each ending with the sentence's final eos id."""
    if len(ids) <= limit:
        return [ids]
    body, eos = ids[:-1], ids[-1]
    step = max(1, limit - 1)
    return [[*body[start : start + step], eos] for start in range(0, len(body), step)]
