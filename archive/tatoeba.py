"""Reader for the Tatoeba zho-eng test file: blocks of source, reference, published output."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEST_FILE = REPO_ROOT / "test_data" / "opus-2020-07-17.test.txt"


@dataclass(frozen=True)
class Block:
    source: str  # Chinese
    reference: str  # English reference translation
    published: str  # output of the released opus-mt-zh-en model


def read_blocks(path: Path = DEFAULT_TEST_FILE) -> list[Block]:
    """Blocks are three lines separated by a blank line; a malformed block is an error, not skipped."""
    text = path.read_text(encoding="utf-8").rstrip("\n")
    blocks = []
    for number, chunk in enumerate(text.split("\n\n"), start=1):
        lines = chunk.split("\n")
        if len(lines) != 3:
            raise ValueError(f"{path}: block {number} has {len(lines)} lines, expected 3")
        blocks.append(Block(*lines))
    return blocks
