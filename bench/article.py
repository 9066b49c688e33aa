"""One news-article-sized request through a real server: beam 4, greedy, then the same again (cache).

    python -m bench.article [--model synthetic|hub id|dir]

The article is Tatoeba test sentences as paragraphs of five, with a URL in every third
paragraph and blank lines between paragraphs: about 5,000 characters, the per-text limit. It is
what the end-to-end test sends. Writes bench/results/article.json.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from archive.tatoeba import read_blocks
from bench.cli import BenchCli, Progress
from bench.common import DEFAULT_MODEL, archive_with, is_standin
from serving.torchserve import TorchServe

say = Progress("article")
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


def run(model_dir: Path) -> dict[str, Any]:
    text = article()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="article-") as scratch:
        # The yaml's own cache settings: the third request shows what a repeat costs.
        store, mar = archive_with("int8", model_dir, Path(scratch), handler={})
        with TorchServe(store, Path(scratch) / "torchserve", models=[mar]) as server:
            runs: list[tuple[str, dict[str, Any]]] = [
                ("beam 4", {}),
                ("greedy", {"num_beams": 1}),
                ("beam 4, sent again", {}),
            ]
            for label, options in runs:
                say(f"{label}: {len(text)} characters ...")
                started = time.perf_counter()
                response = server.client.translate(text, **options)
                seconds = round(time.perf_counter() - started, 2)
                response.raise_for_status()
                stats = response.json()["stats"]
                say(f"{label}: {seconds} s, {stats}")
                rows.append({"run": label, "seconds": seconds, "stats": stats})
    return {
        "characters": len(text),
        "lines": text.count("\n") + 1,
        "standin": is_standin(model_dir),
        "runs": rows,
    }


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("article", __doc__, model=DEFAULT_MODEL, results_dir=True)
    cli.parse(argv)
    print(cli.write("article", run(cli.model_dir())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
