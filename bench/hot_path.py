"""Our engine against CTranslate2 int8 with its vocabulary map: sentences/s in one process, 1 thread.

    python -m bench.hot_path [--model synthetic] [--sentences 64] [--repeats 3] [--kernels auto,avx2]

The same Tatoeba sentences (at reference lengths on the stand-in) decoded in batches of 16 and one
at a time, greedy and beam 4: ours through the loop the server runs (handlers.scheduling.run) with
this host's kernels as a worker chooses them (`auto`), or with each kernel path named in --kernels
(handlers.model.native: a named path runs its own int8 matmul, `auto` may leave them to fbgemm), and
CTranslate2 4.8.5 on the same weights (bench.ctranslate2_peer). All run interleaved `repeats` times
after a warm-up each; the fastest round of each is kept (CPU time). Writes hot-path.json into the
run's folder, prints its table. With --ghz (the core's clock, measured: the VM reports none), each of
our batch-of-16 rows is also set against issue 40's roof on its kernel path (bench.step_roof): the
decoder step and the encoder timed apart, each over its own multiply-adds.

Until commit 96674ee it also timed the paths the hot path replaced (torch's operators around
fbgemm, the mapping around fbgemm's matmul, the output layer on fbgemm); their figures stay in the
results that cite that command (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from bench import ctranslate2_peer
from bench.cli import BenchCli
from bench.common import Sentence, is_standin, sample_sentences, writable
from bench.ladder_rungs import options_for
from bench.step_roof import StepClock, Work, against_roof, clocked
from handlers.handler_config import CpuKernels, HandlerConfig
from handlers.model import native
from handlers.model.translator import Translator
from handlers.scheduling import inline
from handlers.scheduling.run import translate_ids

BATCH = 16
HELD_IDLE_SECONDS = 3600.0  # longer than any run: the idle trim waits until the run ends


def engine_name(choice: str) -> str:
    return "ours" if choice == "auto" else f"ours:{choice}"


Engine = Callable[[Sequence[list[Sentence]], int], StepClock | None]


def measure(
    model_dir: Path,
    count: int,
    repeats: int,
    choices: Sequence[str],
    say: Callable[[str], None],
    ghz: float | None = None,
) -> dict[str, Any]:
    torch.set_num_threads(1)
    standin = is_standin(model_dir)
    # One model per kernel choice: the int8 layers are made for the kernels current at load.
    translators, kernels, paths = {}, {}, {}
    for choice in choices:
        config = HandlerConfig(variant="int8", threads=1, warmup=False, cpu_kernels=cast(CpuKernels, choice))
        translators[choice] = Translator.load(model_dir, config.model)
        loaded = native.current()
        kernels[choice] = native.describe(loaded)
        paths[engine_name(choice)] = "torch" if loaded is None else loaded.name
    peer = ctranslate2_peer.PeerTranslator(model_dir, ctranslate2_peer.convert(model_dir), use_vmap=True)
    sentences = sample_sentences(translators[choices[0]].tokenizer, count)

    def ours(choice: str) -> Engine:
        translator = translators[choice]

        def run(groups: Sequence[list[Sentence]], beams: int) -> StepClock:
            native.use(choice)  # the top-k and row ops a worker with this choice runs
            with clocked(translator.decoder) as clock:
                for g in groups:
                    translate_ids(
                        translator,
                        translator.encode([s.source for s in g]),
                        options_for(g, beams, standin, True),
                    )
            return clock

        return run

    def theirs(groups: Sequence[list[Sentence]], beams: int) -> None:
        for g in groups:
            lengths = ctranslate2_peer.decoding_lengths([s.reference_tokens for s in g], standin)
            peer.translate([s.source for s in g], beams, lengths)

    engines: dict[str, Engine] = {**{engine_name(c): ours(c) for c in choices}, "ct2+map": theirs}
    # A process gives its heap back after an idle time without our work (handlers.model.heap_trim),
    # and every CTranslate2 pass is time without it: at the one second the idle time once was, our
    # next pass faulted the heap in again (9,000-18,000 page faults a beam-4 pass,
    # bench/results/heap-2026-11-29). Engines are compared at their steady state: the trim waits.
    heap = inline.PROCESS_HEAP
    idle_seconds, heap.idle_seconds = heap.idle_seconds, HELD_IDLE_SECONDS
    try:
        rows = _rounds(engines, sentences, repeats, say)
    finally:
        heap.idle_seconds = idle_seconds
    first = translators[choices[0]]
    work = Work.of(first.model.config, int(first.decoder.output.ids.numel()))  # type: ignore[attr-defined]
    for row in rows:
        clocks = row.pop("clocks")
        if ghz is not None and row["shape"] == f"batch of {BATCH}":
            row["roof"] = {
                name: against_roof(clock, row["seconds"][name], work, paths[name], ghz)
                for name, clock in clocks.items()
            }
    return {
        "model": model_dir.name,
        "standin": standin,
        "repeats": repeats,
        "kernels": kernels[choices[0]],
        "kernels_by_engine": {engine_name(c): kernels[c] for c in choices},
        "rows": rows,
    }


def _rounds(
    engines: dict[str, Engine],
    sentences: list[Sentence],
    repeats: int,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    rows = []
    for shape, groups in (
        (f"batch of {BATCH}", [sentences[i : i + BATCH] for i in range(0, len(sentences), BATCH)]),
        ("one sentence", [[s] for s in sentences[:BATCH]]),
    ):
        for beams in (1, 4):
            say(f"{shape}, beam {beams}: {repeats} interleaved rounds")
            for run in engines.values():
                run(groups, beams)  # the warm-up
            seconds: dict[str, list[float]] = {name: [] for name in engines}
            clocks: dict[str, list[StepClock | None]] = {name: [] for name in engines}
            for _ in range(repeats):
                for name, run in engines.items():
                    start = time.process_time()
                    clocks[name].append(run(groups, beams))
                    seconds[name].append(time.process_time() - start)
            done = sum(len(g) for g in groups)
            fastest = {name: min(range(repeats), key=times.__getitem__) for name, times in seconds.items()}
            rows.append(
                {
                    "shape": shape,
                    "beams": beams,
                    "sentences": done,
                    "sentences_per_s": {name: done / seconds[name][i] for name, i in fastest.items()},
                    "seconds": {name: seconds[name][i] for name, i in fastest.items()},
                    # The fastest round's own clock: the roof is set against the round the rate is from.
                    "clocks": {n: c for n, i in fastest.items() if (c := clocks[n][i]) is not None},
                }
            )
    return rows


def table(result: dict[str, Any]) -> str:
    """One row per shape and beam width: each engine's sentences/s, then each of ours over CT2 + map."""
    ours = [name for name in result["rows"][0]["sentences_per_s"] if name != "ct2+map"]
    lines = [
        "| shape | beams | "
        + " | ".join(f"{name}, sent/s" for name in ours)
        + " | CT2 + map, sent/s | "
        + " | ".join(f"{name} / CT2 + map" for name in ours)
        + " |",
        "|---|---|" + "---|" * (2 * len(ours) + 1),
    ]
    for row in result["rows"]:
        rate = row["sentences_per_s"]
        cells = [f"{rate[name]:.1f}" for name in ours] + [f"{rate['ct2+map']:.1f}"]
        cells += [f"{rate[name] / rate['ct2+map']:.2f}x" for name in ours]
        lines.append(f"| {row['shape']} | {row['beams']} | " + " | ".join(cells) + " |")
    return "\n".join(lines + roof_table(result))


def roof_table(result: dict[str, Any]) -> list[str]:
    """Where --ghz was given: each batch-of-16 row's parts, ms a step beside the roof's."""
    rows = [row for row in result["rows"] if "roof" in row]
    if not rows:
        return []
    lines = [
        "",
        "| engine | beams | path | rows a step | part | ms a step | roof, ms a step | over the roof |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for name, roof in row["roof"].items():
            rows_a_step = roof["row_steps"] / max(roof["steps"], 1)
            for part, figures in roof["parts"].items():
                floor, over = figures["roof_ms_per_step"], figures["over_roof"]
                lines.append(
                    f"| {name} | {row['beams']} | {roof['path']} | {rows_a_step:.2f} | {part} "
                    f"| {figures['ms_per_step']:.2f} | {'-' if floor is None else f'{floor:.2f}'} "
                    f"| {'-' if over is None else f'{over:.2f}x'} |"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("hot_path", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=64)
    cli.parser.add_argument("--repeats", type=int, default=3)
    cli.parser.add_argument(
        "--ghz",
        type=float,
        help="the core's clock in GHz, measured (bench/results/roof-2026-11-29): sets batches of 16 "
        "against issue 40's roof on their kernel path",
    )
    cli.parser.add_argument(
        "--kernels",
        default="auto",
        help=f"comma-separated kernel choices to set beside each other, from {', '.join(native.CHOICES)}",
    )
    args = cli.parse(argv)
    choices = list(dict.fromkeys(args.kernels.split(",")))
    unknown = [c for c in choices if c not in native.CHOICES]
    if unknown:
        cli.parser.error(f"--kernels: unknown {', '.join(unknown)} (one of {', '.join(native.CHOICES)})")
    result = measure(cli.model_dir(), args.sentences, args.repeats, choices, cli.say, args.ghz)
    path = cli.write("hot-path", result)
    # The table beside its json, as printed: the ratios docs quote (the json holds the rates).
    writable(path.with_suffix(".md")).write_text(table(result) + "\n")
    print(table(result))
    cli.say(f"wrote {path} and its table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
