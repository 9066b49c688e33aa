"""Every result file the docs cite exists: a figure names where it came from, and that file stays.

Links and backticked paths into bench/results (and bench/studies/results) from the README and the
docs, resolved as a reader would; `{a,b}` in a path stands for both files. Results are never
written over (bench.common.writable), so a cited file that is gone was deleted or renamed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from archive.tatoeba import REPO_ROOT

DOCS = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    *sorted((REPO_ROOT / "deploy").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
TICKED = re.compile(r"`(bench/(?:studies/)?results/[^`\s<*]+)`")


def expanded(path: str) -> list[str]:
    """`a/{b,c}.txt` -> a/b.txt, a/c.txt (one brace group)."""
    match = re.search(r"\{([^}]+)\}", path)
    if match is None:
        return [path]
    return [path[: match.start()] + choice + path[match.end() :] for choice in match.group(1).split(",")]


def missing_results(doc: Path, root: Path = REPO_ROOT) -> list[str]:
    """The result paths `doc` cites (links from its folder, backticked ones from `root`) that are gone."""
    text = doc.read_text()
    paths = [str(doc.parent / link) for link in LINK.findall(text)] + [
        str(root / path) for path in TICKED.findall(text)
    ]
    return [
        choice
        for path in paths
        if "/results" in path
        for choice in expanded(path)
        if not Path(choice.rstrip("/")).exists()
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(REPO_ROOT)))
def test_every_cited_result_exists(doc: Path) -> None:
    assert missing_results(doc) == [], f"{doc.name} cites results that are not there"


def test_a_missing_result_is_found_in_links_ticks_and_braces(tmp_path: Path) -> None:
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "a.json").write_text("{}")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](bench/results/a.json) [b](bench/results/b.json#x) `bench/results/{a,c}.json`")
    assert sorted(Path(path).name for path in missing_results(doc, tmp_path)) == ["b.json", "c.json"]
