"""bench.splitters' result as a page: the winner and why, the Tatoeba table, the hard cases by class."""

from __future__ import annotations

from typing import Any

from bench.signature import command_of


def markdown(result: dict[str, Any]) -> str:
    splitters: dict[str, dict[str, Any]] = result["splitters"]
    names = list(splitters)
    lines = [
        "# Sentence splitters: ours against pysbd and sentencex (language zh)",
        "",
        f"{result['date']}, {result['machine']['cpu']} ({result['machine']['cores']} cores, shared), "
        f"Python {result['machine']['python']}; `{command_of(result)}`.",
        "",
        f"**Winner: {result['winner']}.**",
        "",
        *(f"- {line}" for line in [*result["why"], *result["beats_ours"]]),
        "",
        f"## Tatoeba paragraphs ({result['paragraphs']} paragraphs of 2-8 consecutive test sentences, "
        f"seed {result['seed']}, no separator)",
        "",
        f"{result['parts_without_final_terminator']} of the {result['tatoeba_sentences']} sentences end with "
        f"no terminator (a boundary after them has nothing to find) and "
        f"{result['parts_with_several_terminator_runs']} hold several terminator runs (a split inside them "
        f"counts as a false positive here, often wrongly); the single-terminator rows keep only the "
        f"{result['single_terminator_paragraphs']} paragraphs free of both.",
        "",
        "| splitter | version | paragraphs | precision | recall | F1 | exact paragraphs | sentences/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for subset in ("all", "single_terminator"):
        for name in names:
            r = splitters[name]
            s = r["tatoeba"][subset]
            lines.append(
                f"| {name} | {r['version']} | {subset.replace('_', '-')} ({s['paragraphs']}) "
                f"| {s['precision']} | {s['recall']} | {s['f1']} | {s['exact_paragraphs']:.1%} "
                f"| {r['tatoeba']['sentences_per_s']} |"
            )
    missed = ", ".join(f"{n} {r['tatoeba']['missed_after_quote']}" for n, r in splitters.items())
    lines += [
        "",
        f"Boundaries missed right after a closing quote (all paragraphs): {missed}. Ours keeps text that "
        "follows a closing quote on its line in the same sentence (「好。」她说。, the quotes cases "
        "below); sentencex splits after the quote, which these Tatoeba boundaries favour.",
    ]
    cases = result["hard_cases"]
    lines += [
        "",
        f"## Hard cases ({cases['total']}: bench/splitter_cases.py HARD_CASES + "
        "EXTRA_CASES), passed per class",
        "",
        "| class | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for klass, counts in cases["by_class"].items():
        lines.append(f"| {klass} | " + " | ".join(f"{counts[n][0]}/{counts[n][1]}" for n in names) + " |")
    lines.append(
        "| **all** | " + " | ".join(f"**{cases['passed'][n]}/{cases['total']}**" for n in names) + " |"
    )
    lines += ["", "Failures:", ""]
    for case in cases["cases"]:
        failed = [n for n in names if not case["passed"][n]]
        if failed:
            lines.append(
                f"- `{case['text']!r}` ({case['class']}) expected {case['expected']}; "
                + "; ".join(f"{n}: {case['got'][n]}" for n in failed)
            )
    lines += [
        "",
        "## Round trip (segments joined, and the library's own offsets, against the text)",
        "",
        "| splitter | texts | join == text | offsets exact |",
        "|---|---|---|---|",
        *(
            f"| {n} | {r['round_trip']['texts']} | {r['round_trip']['join_equals_text']} "
            f"| {r['round_trip']['offsets_exact']} |"
            for n, r in splitters.items()
        ),
    ]
    return "\n".join(lines) + "\n"
