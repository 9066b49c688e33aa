"""Every relative link in the README and the docs lands: the file exists, and a named anchor is a
heading there (GitHub's rule: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from archive.tatoeba import REPO_ROOT

DOCS = sorted(
    [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md"), *(REPO_ROOT / "deploy").glob("*.md")]
)
LINK = re.compile(r"\]\(([^)\s]*)\)")


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in doc.read_text().splitlines() if line.startswith("#")}


def broken_links(doc: Path) -> list[str]:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if not target or re.match(r"[a-z]+:", target):  # a URL or a mail address: not ours to check
            continue
        path, _, anchor = target.partition("#")
        landing = (doc.parent / path).resolve() if path else doc
        missing_heading = (
            landing.exists() and anchor and landing.suffix == ".md" and anchor not in anchors(landing)
        )
        if not landing.exists() or missing_heading:
            broken.append(target)
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(REPO_ROOT)))
def test_every_relative_link_lands(doc: Path) -> None:
    assert broken_links(doc) == []


def test_a_missing_file_and_a_missing_heading_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## The `config/x.yaml` part (2026)\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#the-configxyaml-part-2026) [gone](gone.md) [wrong](other.md#nowhere) "
        "[self](#local) [web](https://example.com/x)\n\n## Local\n"
    )
    assert broken_links(doc) == ["gone.md", "other.md#nowhere"]
