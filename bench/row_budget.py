"""The row budget curve: sentences/s of one TorchServe-sized batch against `max_batch_rows`.

    python -m bench.row_budget [--model synthetic] [--sentences 64] [--budgets 4 8 16 32 64 128]

A batch of sentences goes through `Translator.translate_batch` (int8, fast decoder, 1 thread), which
cuts it into decode units of at most `max_batch_rows` rows (texts x beams), similar lengths
together. Beam 4 and greedy. On the stand-in, outputs are forced to reference lengths. Writes
bench/results/row_budget.json and row_budget.png.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.cli import BenchCli, Progress
from bench.common import is_standin, sample_sentences
from bench.latency import options_for
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.translator import Translator

REPEATS = 2
say = Progress("row_budget")


def measure(model_dir: Path, sentences: int, budgets: list[int], beams: int) -> list[dict[str, Any]]:
    translator = Translator.load(model_dir, HandlerConfig(variant="int8", threads=1))
    sample = sample_sentences(translator.tokenizer, sentences)
    ids = translator.encode([s.source for s in sample])
    options = options_for(sample, beams, is_standin(model_dir))  # stand-in: each its reference length
    rows = []
    for budget in budgets:
        translator.config = HandlerConfig(variant="int8", threads=1, max_batch_rows=budget)
        best = min(_timed(translator, ids, options) for _ in range(REPEATS))
        rows.append({"max_batch_rows": budget, "sentences_per_s": round(len(ids) / best, 2)})
        say(f"beams={beams} rows={budget}: {rows[-1]['sentences_per_s']} sent/s")
    return rows


def _timed(translator: Translator, ids: list[list[int]], options: list[GenerationOptions]) -> float:
    started = time.perf_counter()
    translator.translate_batch(ids, options)
    return time.perf_counter() - started


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for beams, rows in result["curves"].items():
        label = "greedy" if beams == "1" else f"beam {beams}"
        axis.plot(
            [r["max_batch_rows"] for r in rows], [r["sentences_per_s"] for r in rows], "o-", label=label
        )
    axis.set_xscale("log", base=2)
    axis.set_xlabel("max_batch_rows (texts x beams per decode unit)")
    axis.set_ylabel("sentences/s (1 thread)")
    axis.set_title(f"Row budget: {result['sentences']} sentences, int8, fast decoder")
    axis.legend()
    standin = " | offline stand-in, reference-length outputs" if result["standin"] else ""
    figure.text(0.01, 0.01, f"{result['date']} | {result['machine']['cpu']}{standin}", fontsize=7)
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("row_budget", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=64)
    cli.parser.add_argument("--budgets", type=int, nargs="+", default=[4, 8, 16, 32, 64, 128])
    cli.parser.add_argument("--beams", type=int, nargs="+", default=[4, 1])
    args = cli.parse(argv)
    model_dir = cli.model_dir()
    curves = {str(b): measure(model_dir, args.sentences, args.budgets, b) for b in args.beams}
    payload = {"sentences": args.sentences, "standin": is_standin(model_dir), "curves": curves}
    path = cli.write("row_budget", payload)
    plot(json.loads(path.read_text()), args.results_dir / "row_budget.png")  # with its date and machine
    for beams, rows in curves.items():
        best = max(rows, key=lambda r: r["sentences_per_s"])
        print(
            f"beams={beams}: "
            + ", ".join(f"{r['max_batch_rows']}: {r['sentences_per_s']}" for r in rows)
            + f"  (best {best['max_batch_rows']})"
        )
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
