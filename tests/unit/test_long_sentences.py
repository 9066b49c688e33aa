"""Over-long sentences: cut at clause breaks, else by tokens, never truncated."""

from __future__ import annotations

from collections.abc import Sequence

from handlers.model.long_sentences import fit

EOS = 0


def encode(texts: Sequence[str]) -> list[list[int]]:
    """One id per character, then eos: lengths are easy to reason about."""
    return [[ord(char) for char in text] + [EOS] for text in texts]


def decode(chunks: list[list[int]]) -> str:
    return "".join(chr(i) for chunk in chunks for i in chunk if i != EOS)


def test_a_sentence_within_the_limit_is_one_chunk() -> None:
    text = "短句。"
    assert fit(text, encode([text])[0], encode, limit=10) == encode([text])


def test_cuts_at_clause_breaks_and_packs_clauses_that_fit() -> None:
    text = "第一个分句，第二个分句，第三个分句、第四个分句。"
    chunks = fit(text, encode([text])[0], encode, limit=14)
    assert [decode([c]) for c in chunks] == ["第一个分句，第二个分句，", "第三个分句、第四个分句。"]
    assert all(len(chunk) <= 14 and chunk[-1] == EOS for chunk in chunks)


def test_a_clause_over_the_limit_is_cut_by_tokens_and_nothing_is_lost() -> None:
    text = "这是一个没有任何逗号的非常非常非常长的句子" * 3
    chunks = fit(text, encode([text])[0], encode, limit=8)
    assert all(len(chunk) <= 8 and chunk[-1] == EOS for chunk in chunks)
    assert decode(chunks) == text
