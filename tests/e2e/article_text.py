"""The article-sized text the document tests send: Tatoeba sentences as paragraphs of five, a URL in
every third paragraph, blank lines between paragraphs, about 5,000 characters (the per-text limit).

The same text timed one article-sized request (bench/studies/README.md, "One article-sized request").
"""

from __future__ import annotations

from archive.tatoeba import read_blocks

URLS = ["https://example.com/news/2026/11/22.html?id=7", "http://www.example.org/a_b", "www.example.cn"]


def article(characters: int = 5000) -> str:
    """Tatoeba sentences as paragraphs of five, a URL in every third, a blank line between paragraphs."""
    sentences = [block.source for block in read_blocks()]
    paragraphs: list[str] = []
    used = 0
    for start in range(0, len(sentences), 5):
        paragraph = "".join(sentences[start : start + 5])
        if start // 5 % 3 == 0:
            paragraph += f"详情见 {URLS[start // 5 % len(URLS)]} 。"
        if used + len(paragraph) + 2 > characters:
            break
        paragraphs.append(paragraph)
        used += len(paragraph) + 2
    return "\n\n".join(paragraphs)
