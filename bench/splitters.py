"""Our sentence splitter (handlers/text/splitting.py) against pysbd and sentencex, both with language "zh".

    python -m bench.splitters [--seed 0] [--repeats 3] [--results-dir bench/results]

Three measurements, written to bench/results/splitters.json and splitters.md:
- Tatoeba paragraphs: 2-8 consecutive test sentences concatenated with no separator (as Chinese
  is written), seeded; each splitter's boundaries scored against the true ones (precision, recall,
  F1, exact paragraphs) and its speed in sentences/s. Some Tatoeba "sentences" are several
  sentences or end with no terminator at all, so the score is also given on the paragraphs whose
  every part holds exactly one terminator run, at its end.
- Hard cases: bench/splitter_cases.py's HARD_CASES (the list the splitter's tests pin) plus
  its EXTRA_CASES, grouped by class (book titles, quotes, ellipses, numbers, ...).
- Round trip: do the segments, and the library's own offsets, give back the text exactly, with
  its whitespace? Reassembly needs join == text.
"""

from __future__ import annotations

import importlib.metadata
import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from archive.tatoeba import read_blocks
from bench.cli import BenchCli, Progress
from bench.splitter_cases import EXTRA_CASES, HARD_CASES
from bench.splitters_report import markdown
from handlers.text.splitting import sentences_of, split_text

COMMAND = "python -m bench.splitters"
say = Progress("splitters")
# First matching class names a case; the order puts the rarer, harder feature first.
CASE_CLASSES: list[tuple[str, Callable[[str], bool]]] = [
    ("line breaks", lambda t: "\n" in t),
    ("unmatched brackets", lambda t: _unmatched(t)),
    ("book titles 《》", lambda t: "《" in t),
    ("quotes", lambda t: any(q in t for q in '“「『‘"')),
    ("brackets", lambda t: any(b in t for b in "（(")),
    ("numbers", lambda t: re.search(r"\d\.\d", t) is not None),
    ("mixed Latin", lambda t: re.search(r"[A-Za-z]{2}", t) is not None),
    ("ellipses", lambda t: "…" in t or "..." in t),
    ("?! runs", lambda t: re.search(r"[?!？！]{2}", t) is not None),
    ("；", lambda t: "；" in t),
]
QUOTE_CLOSERS = frozenset("”’」』\"'")
TERMINATOR_RUN = re.compile(r"[。！？；…｡.!?;]+")
ENDS_WITH_TERMINATOR = re.compile(r"[。！？；…｡.!?;][”’」』）)\"']*$")
# Random texts for the round trip: the property test's alphabet, astral characters and odd spaces.
FUZZ_ALPHABET = list("你好世界。！？；…，、.!?; \n\r\t《》「」“”（）()\"'3.5abcXZ\u3000\u2028😀")
WHITESPACE_TEXTS = [
    "  第一行。第二句！\n\n  第二段。 是的。  \r\n最后",
    "\u3000\u3000他来了。\t她走了。 ",
    "好。好。好。",
    "😀你好。😀再见！",
    "行一\r\n\r\n行二\n",
    " Hello world.  你好。 ",
]


@dataclass(frozen=True)
class Candidate:
    name: str
    version: str
    segments: Callable[[str], list[str]]  # as the library returns them
    spans: Callable[[str], list[tuple[int, int]]]  # the library's own offsets


def candidates() -> list[Candidate]:
    import pysbd
    import sentencex

    listing = pysbd.Segmenter(language="zh", clean=False)
    offsets = pysbd.Segmenter(language="zh", clean=False, char_span=True)
    return [
        Candidate(
            "ours", "handlers/text/splitting.py", lambda t: [p.text for p in split_text(t)], _our_spans
        ),
        Candidate(
            "pysbd",
            importlib.metadata.version("pysbd"),
            lambda t: list(listing.segment(t)),
            lambda t: [(s.start, s.end) for s in offsets.segment(t)],
        ),
        Candidate(
            "sentencex",
            importlib.metadata.version("sentencex"),
            lambda t: list(sentencex.segment("zh", t)),
            lambda t: [
                (b["start_index"], b["end_index"]) for b in sentencex.get_sentence_boundaries("zh", t)
            ],
        ),
    ]


def _our_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for piece in split_text(text):
        spans.append((start, start + len(piece.text)))
        start += len(piece.text)
    return spans


@dataclass(frozen=True)
class Paragraph:
    parts: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def boundaries(self) -> frozenset[int]:
        ends, offset = [], 0
        for part in self.parts[:-1]:
            offset += len(part)
            ends.append(offset)
        return frozenset(ends)

    @property
    def single_terminator(self) -> bool:
        """Every part is one sentence by its punctuation: one terminator run, at its end."""
        return all(len(TERMINATOR_RUN.findall(p)) == 1 and ENDS_WITH_TERMINATOR.search(p) for p in self.parts)


def paragraphs(sources: Sequence[str], seed: int = 0, low: int = 2, high: int = 8) -> list[Paragraph]:
    """Consecutive sources, 2-8 at a time (seeded), concatenated with no separator."""
    rng = random.Random(seed)
    out, index = [], 0
    while index + low <= len(sources):
        count = rng.randint(low, high)
        out.append(Paragraph(tuple(s.strip() for s in sources[index : index + count])))
        index += count
    return out


def predicted_boundaries(text: str, segments: Sequence[str]) -> frozenset[int]:
    """Where each segment's text starts (the first excepted), found in order in `text`.

    Aligning the segments' stripped text, not trusting offsets, scores every library the same way
    whatever its whitespace handling; a segment that cannot be found is skipped.
    """
    starts, cursor = [], 0
    for segment in segments:
        content = segment.strip()
        position = text.find(content, cursor) if content else -1
        if position >= 0:
            starts.append(position)
            cursor = position + len(content)
    return frozenset(starts[1:])


def score(pairs: Sequence[tuple[Paragraph, frozenset[int]]]) -> dict[str, Any]:
    """Boundary precision/recall/F1 and the share of paragraphs split exactly right."""
    tp = sum(len(p.boundaries & got) for p, got in pairs)
    fp = sum(len(got - p.boundaries) for p, got in pairs)
    fn = sum(len(p.boundaries - got) for p, got in pairs)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    exact = sum(p.boundaries == got for p, got in pairs)
    return {
        "paragraphs": len(pairs),
        "boundaries": tp + fn,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "exact_paragraphs": round(exact / len(pairs), 4) if pairs else 0.0,
    }


def tatoeba(candidate: Candidate, paras: Sequence[Paragraph], repeats: int) -> dict[str, Any]:
    """Scores on all paragraphs and on the single-terminator ones; speed as the best of `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        outputs = [candidate.segments(p.text) for p in paras]
        best = min(best, time.perf_counter() - started)
    pairs = [(p, predicted_boundaries(p.text, out)) for p, out in zip(paras, outputs, strict=True)]
    sentences = sum(len(p.parts) for p in paras)
    return {
        "all": score(pairs),
        "single_terminator": score([(p, got) for p, got in pairs if p.single_terminator]),
        # Boundaries missed right after a closing quote: where the conventions for 。” differ.
        "missed_after_quote": sum(
            p.text[b - 1] in QUOTE_CLOSERS for p, got in pairs for b in p.boundaries - got
        ),
        "seconds": round(best, 4),
        "sentences_per_s": round(sentences / best),
    }


def case_class(text: str) -> str:
    return next((name for name, test in CASE_CLASSES if test(text)), "plain")


def _unmatched(text: str) -> bool:
    pairs = [("《", "》"), ("「", "」"), ("『", "』"), ("“", "”"), ("（", "）"), ("(", ")")]
    return any(text.count(opener) != text.count(closer) for opener, closer in pairs)


def sentences(candidate: Candidate, text: str) -> list[str]:
    """The sentences a splitter finds: its segments without surrounding whitespace, empty ones dropped."""
    if candidate.name == "ours":
        return sentences_of(text)
    return [s.strip() for s in candidate.segments(text) if s.strip()]


def hard_cases(cands: Sequence[Candidate]) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for text, expected in [*HARD_CASES, *EXTRA_CASES]:
        got = {c.name: sentences(c, text) for c in cands}
        cases.append(
            {
                "text": text,
                "class": case_class(text),
                "expected": expected,
                "got": got,
                "passed": {name: out == expected for name, out in got.items()},
            }
        )
    by_class: dict[str, dict[str, list[int]]] = {}
    for case in cases:
        counts = by_class.setdefault(case["class"], {c.name: [0, 0] for c in cands})
        for name, ok in case["passed"].items():
            counts[name][0] += ok
            counts[name][1] += 1
    totals = {c.name: sum(case["passed"][c.name] for case in cases) for c in cands}
    return {"cases": cases, "by_class": by_class, "passed": totals, "total": len(cases)}


def round_trip_texts(seed: int = 0, count: int = 300) -> list[str]:
    rng = random.Random(seed)
    fuzz = ["".join(rng.choices(FUZZ_ALPHABET, k=rng.randint(1, 60))) for _ in range(count)]
    return [*WHITESPACE_TEXTS, *(text for text, _ in [*HARD_CASES, *EXTRA_CASES]), *fuzz]


def round_trip(candidate: Candidate, texts: Sequence[str]) -> dict[str, Any]:
    """join(segments) == text, and offsets that tile the text and name each segment exactly."""
    joined = offsets = 0
    failures: list[str] = []
    for text in texts:
        segments = candidate.segments(text)
        spans = candidate.spans(text)
        join_ok = "".join(segments) == text
        tiles = [text[a:b] for a, b in spans] == segments and "".join(text[a:b] for a, b in spans) == text
        joined += join_ok
        offsets += tiles
        if not (join_ok and tiles) and len(failures) < 3:
            failures.append(text)
    return {"texts": len(texts), "join_equals_text": joined, "offsets_exact": offsets, "examples": failures}


def winner(results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """Exact round trip is required (reassembly copies the gaps); then hard cases, then F1, then speed."""
    exact = [n for n, r in results.items() if r["round_trip"]["join_equals_text"] == r["round_trip"]["texts"]]
    pool = exact or list(results)
    name = max(
        pool,
        key=lambda n: (
            results[n]["hard_cases_passed"],
            results[n]["tatoeba"]["single_terminator"]["f1"],
            results[n]["tatoeba"]["sentences_per_s"],
        ),
    )
    best = results[name]
    why = [
        f"round trip: {', '.join(exact) or 'none'} give back every text exactly "
        f"({best['round_trip']['texts']} texts with whitespace, line breaks and astral characters)",
    ]
    for other, r in results.items():
        if other == name:
            continue
        why.append(
            f"against {other}: hard cases {best['hard_cases_passed']} vs {r['hard_cases_passed']}, "
            f"F1 (single-terminator paragraphs) {best['tatoeba']['single_terminator']['f1']} vs "
            f"{r['tatoeba']['single_terminator']['f1']}, all paragraphs {best['tatoeba']['all']['f1']} vs "
            f"{r['tatoeba']['all']['f1']}, {best['tatoeba']['sentences_per_s']} vs "
            f"{r['tatoeba']['sentences_per_s']} sentences/s"
        )
    return name, why


def beats_ours(results: dict[str, dict[str, Any]], cases: dict[str, Any]) -> list[str]:
    """Where a library does better than handlers/text/splitting.py: case classes, Tatoeba F1, speed."""
    ours = results["ours"]
    lines = []
    for name, r in results.items():
        if name == "ours":
            continue
        better = [k for k, counts in cases["by_class"].items() if counts[name][0] > counts["ours"][0]]
        better += [
            f"Tatoeba F1 on {subset.replace('_', '-')} paragraphs ({r['tatoeba'][subset]['f1']} vs "
            f"{ours['tatoeba'][subset]['f1']})"
            for subset in ("all", "single_terminator")
            if r["tatoeba"][subset]["f1"] > ours["tatoeba"][subset]["f1"]
        ]
        if r["tatoeba"]["sentences_per_s"] > ours["tatoeba"]["sentences_per_s"]:
            ratio = r["tatoeba"]["sentences_per_s"] / ours["tatoeba"]["sentences_per_s"]
            better.append(f"speed ({ratio:.1f}x)")
        if better:
            lines.append(f"{name} beats ours on: {'; '.join(better)}")
    return lines


def run(seed: int = 0, repeats: int = 3, limit: int | None = None) -> dict[str, Any]:
    sources = [b.source for b in read_blocks()][:limit]
    paras = paragraphs(sources, seed)
    single = sum(p.single_terminator for p in paras)
    say(f"{len(sources)} Tatoeba sentences -> {len(paras)} paragraphs ({single} single-terminator)")
    cands = candidates()
    cases = hard_cases(cands)
    texts = round_trip_texts(seed)
    results: dict[str, dict[str, Any]] = {}
    for cand in cands:
        say(f"{cand.name}: Tatoeba paragraphs x{repeats}, round trip")
        results[cand.name] = {
            "version": cand.version,
            "tatoeba": tatoeba(cand, paras, repeats),
            "hard_cases_passed": cases["passed"][cand.name],
            "round_trip": round_trip(cand, texts),
        }
        t = results[cand.name]["tatoeba"]
        say(
            f"{cand.name}: F1 {t['all']['f1']} (single-terminator {t['single_terminator']['f1']}), "
            f"{t['sentences_per_s']} sentences/s, hard cases {cases['passed'][cand.name]}/{cases['total']}"
        )
    name, why = winner(results)
    return {
        "command": COMMAND,  # as before signatures; the signature holds the whole line
        "seed": seed,
        "tatoeba_sentences": len(sources),
        "paragraphs": len(paras),
        "single_terminator_paragraphs": single,
        "parts_without_final_terminator": sum(not ENDS_WITH_TERMINATOR.search(s) for s in sources),
        "parts_with_several_terminator_runs": sum(len(TERMINATOR_RUN.findall(s)) > 1 for s in sources),
        "splitters": results,
        "hard_cases": cases,
        "winner": name,
        "why": why,
        "beats_ours": beats_ours(results, cases),
    }


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("splitters", __doc__, results_dir=True)
    cli.parser.add_argument("--seed", type=int, default=0)
    cli.parser.add_argument("--repeats", type=int, default=3, help="timing passes; the fastest counts")
    args = cli.parse(argv)
    result = run(args.seed, args.repeats)
    path = cli.write("splitters", result)
    written = json.loads(path.read_text())  # with the date, machine and signature write_result adds
    (args.results_dir / "splitters.md").write_text(markdown(written))
    print(f"winner: {result['winner']} -> {path} and splitters.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
