"""Every figure in the README's headline and in docs/BENCHMARKS.md is held by a result file it cites.

A figure is a number with a measured unit (req/s, sentences/s, ms, s, MB, GB) or a ratio (x, %).
Each `##` section of BENCHMARKS.md, and each bullet of the README's "Headline figures", is backed
by the result files it links or backticks (a folder stands for every file in it) and, through a
link to a section of BENCHMARKS.md or of the history, by that section's own files.

- A measured figure is held when a number in those files rounds to it at the figure's precision
  (seconds may be written as milliseconds and the reverse, bytes as MB or GB).
- A ratio is held the same way, or when it is the quotient of two held figures of the same
  paragraph or table row (a percentage: the quotient less one, or one less the quotient).
- Not figures: targets (a table column headed "target", or a number after "target" or "at least").

So a figure whose file is gone, or that was copied from a run other than the one cited, fails here.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from archive.tatoeba import REPO_ROOT

BENCHMARKS = REPO_ROOT / "docs" / "BENCHMARKS.md"
README = REPO_ROOT / "README.md"
HEADLINE = "## Headline figures"

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# A ratio's sign follows its number ("1.4x", "40%"); "2 x 1 threads" is a layout, not a ratio.
UNIT = r"(?<=\d)x(?![\w-])|(?<=\d)%|\s?(?:req/s|requests/s|sentences/s|sent/s|ms\b|s\b|MB\b|GB\b)"
# "28.6-36.5 req/s", "24.6 against 7.2 req/s" and "1.4-1.8x" name two figures; "3.8 s" one; a
# figure in bold counts as well.
PAIR = r"\s?[-–]\s?|\s(?:against|and|to)\s"
FIGURE = re.compile(rf"(?<![\w.\-/#:])\**({NUMBER})\**(?:(?:{PAIR})\**({NUMBER})\**)?({UNIT})")
# Targets, and arithmetic the text shows ("1,478 ms / 15 steps = 98.5 ms"), are not measurements.
NOT_A_FIGURE = re.compile(r"(?:(?:target(?: of)?|at least|within)\s+|=\s*)\**$", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")
TICKED = re.compile(r"`(bench/(?:studies/)?results/[^`\s<*]+)`")
RESULT_SUFFIXES = {".json", ".jsonl", ".md", ".txt", ".csv", ".tsv"}
RATIOS = {"x", "%"}


@dataclass(frozen=True)
class Figure:
    text: str
    value: float
    decimals: int
    unit: str


def figures_in(block: str) -> list[Figure]:
    """The figures of one paragraph or table row, targets left out."""
    found = []
    for match in FIGURE.finditer(block):
        if NOT_A_FIGURE.search(block[: match.start()]):
            continue
        unit = match.group(3).strip()
        for number in (match.group(1), match.group(2)):
            if number is not None:
                plain = number.replace(",", "")
                decimals = len(plain.partition(".")[2])
                found.append(Figure(f"{number} {unit}", float(plain), decimals, unit))
    return found


def without_target_columns(header: str, row: str) -> str:
    """A table row with the cells of columns whose header names a target emptied."""
    targets = {i for i, cell in enumerate(header.split("|")) if "target" in cell.lower()}
    return "|".join("" if i in targets else cell for i, cell in enumerate(row.split("|")))


def blocks(text: str) -> list[str]:
    """Paragraphs and bullets one block each; a table's rows one each, targets emptied, the header
    row left out (it names columns, it holds no figures of its own)."""
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n|\n(?=- )", text):
        if not paragraph.lstrip().startswith("|"):
            out.append(paragraph)
            continue
        rows = [row for row in paragraph.strip().splitlines() if not re.fullmatch(r"\|[\s|:-]+\|", row)]
        out.extend(without_target_columns(rows[0], row) for row in rows[1:])
    return out


def sections(doc: Path) -> dict[str, str]:
    """A markdown file's `##` sections by their GitHub anchor."""
    found = {}
    for part in re.split(r"(?m)^(?=## )", doc.read_text()):
        heading = part.splitlines()[0] if part.startswith("## ") else ""
        anchor = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")
        found[anchor] = part
    return found


def result_files(text: str, base: Path, depth: int = 1) -> list[Path]:
    """The result files `text` cites from `base`, and those of the doc sections it links (one level)."""
    targets = [base / link for link in LINK.findall(text)] + [
        REPO_ROOT / tick for tick in TICKED.findall(text)
    ]
    files: list[Path] = []
    for target in targets:
        path_part, _, anchor = str(target).partition("#")
        path = Path(path_part).resolve()
        if "results" in path.parts and path.exists():
            files.extend(path.rglob("*") if path.is_dir() else [path])
        elif path.suffix == ".md" and anchor and depth > 0 and path.exists():
            section = sections(path).get(anchor, "")
            files.extend(result_files(section, path.parent, depth - 1))
    return sorted({file for file in files if file.is_file() and file.suffix in RESULT_SUFFIXES})


def numbers_in(files: list[Path]) -> set[float]:
    values = set()
    for file in files:
        for number in re.findall(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", file.read_text(errors="replace")):
            values.add(float(number))
    return values


def rounds_to(value: float, figure: Figure) -> bool:
    return bool(abs(round(value, figure.decimals) - figure.value) < 10.0 ** -(figure.decimals + 3))


def same_quantity(value: float, figure: Figure) -> list[float]:
    """The ways a file may write this figure's number: as it is, or in the next unit."""
    scales = {"ms": (1, 1e3), "s": (1, 1e-3), "MB": (1, 1e-6, 2**-20), "GB": (1, 1e-9, 2**-30)}
    return [value * scale for scale in scales.get(figure.unit, (1,))]


def unheld(block: str, file_numbers: set[float]) -> list[str]:
    figures = figures_in(block)
    # Each figure's readings: the file's numbers (in the figure's unit) that round to it.
    readings = {
        figure: [
            scaled
            for value in file_numbers
            for scaled in same_quantity(value, figure)
            if rounds_to(scaled, figure)
        ]
        for figure in figures
    }
    measured = [readings[f] for f in figures if readings[f] and f.unit not in RATIOS]
    # A ratio of two held figures is taken from their files' readings, not from their rounded text.
    quotients = {
        a / b
        for first, second in itertools.permutations(measured, 2)
        for a, b in itertools.product(first, second)
        if b
    }

    def derived(figure: Figure) -> bool:
        if figure.unit == "%":
            return any(rounds_to(abs(q - 1) * 100, figure) for q in quotients)
        return any(rounds_to(q, figure) for q in quotients)

    return [f.text for f in figures if not readings[f] and not (f.unit in RATIOS and derived(f))]


def unheld_in(text: str, base: Path) -> list[str]:
    numbers = numbers_in(result_files(text, base))
    return [figure for block in blocks(text) for figure in unheld(block, numbers)]


def headline_bullets() -> list[str]:
    text = README.read_text().partition(HEADLINE)[2].split("\n## ")[0]
    return [bullet for bullet in re.split(r"\n(?=- )", text) if bullet.startswith("- ")]


@pytest.mark.parametrize("anchor", [a for a in sections(BENCHMARKS) if a], ids=lambda anchor: anchor[:60])
def test_every_benchmarks_figure_is_held_by_a_file_its_section_cites(anchor: str) -> None:
    section = sections(BENCHMARKS)[anchor]
    assert unheld_in(section, BENCHMARKS.parent) == []


@pytest.mark.parametrize("number", range(len(headline_bullets())))
def test_every_readme_headline_figure_is_held_by_a_file_its_bullet_cites(number: int) -> None:
    bullet = headline_bullets()[number]
    assert unheld_in(bullet, README.parent) == [], bullet


def test_a_figure_not_in_its_files_is_found_and_a_quotient_of_held_figures_is_held(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "run.json").write_text(
        '{"rps": 24.61, "peer_rps": 7.2, "p50_s": 3.81, "pss_bytes": 662000000}'
    )
    cited = "[run](results/run.json)"
    assert (
        unheld_in(f"ours **24.6** req/s (p50 3,810 ms), 662 MB; the peer 7.2 req/s: 3.4x. {cited}", tmp_path)
        == []
    )
    assert unheld_in(f"ours 24.7 req/s, 3.9x the peer's 7.2 req/s, 12% more. {cited}", tmp_path) == [
        "24.7 req/s",
        "3.9 x",
        "12 %",
    ]
    assert unheld_in("ours 24.6 req/s, cited nowhere", tmp_path) == ["24.6 req/s"]
    table = f"| run | req/s | target |\n|---|---|---|\n| ours | 24.6 req/s | 30 req/s |\n\n{cited}"
    assert unheld_in(table, tmp_path) == []
    assert unheld_in(f"the target of 3.5x was missed, at least 1.2x. {cited}", tmp_path) == []
