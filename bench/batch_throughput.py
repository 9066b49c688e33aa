"""Batch prediction's throughput: the batch job's engine in process, and the same through Ray local.

    python -m bench.batch_throughput                 # 2,000 Tatoeba sentences, the full-size stand-in
    python -m bench.batch_throughput --quick         # a smoke run

The same Tatoeba sentences go through the same int8 archive (config/zh_en_int8.yaml, sentence cache
off as in the other benches, so every sentence is decoded), cut into the job's shards (sorted by
length, batch.shards), and translated three ways:
- in_process: batch.engines.LocalEngine, one process with the archive's threads (1);
- ray_one_actor: batch.engines.RayEngine with one actor: the same layout, so the ratio to
  in_process is what Ray Data costs;
- ray_per_core: one actor per core, one thread each (the shipped layout).
Each run's time includes loading the model (every actor's), not starting Ray (reported apart).
On the offline stand-in every output is forced to its reference translation's token length
(batch.units.Unit.forced_tokens, for benchmarks only), as bench.latency does, so that decode work
matches the real model's; results say so under "output_lengths".
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from batch.engines import Engine, LocalEngine, RayEngine, host_cpus, ray_session
from batch.shards import Shard, ShardBudget, cut_shards
from batch.units import JobOptions, Unit, UnitResult
from bench.cli import BenchCli
from bench.common import archive_with, is_standin, sample_sentences

DEFAULT_SENTENCES = 2000
QUICK_SENTENCES = 24


def command() -> BenchCli:
    cli = BenchCli("batch_throughput", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=DEFAULT_SENTENCES)
    cli.parser.add_argument("--quick", action="store_true", help=f"{QUICK_SENTENCES} sentences (smoke run)")
    cli.parser.add_argument("--beams", type=int, default=4, help="num_beams (bench.load's served rung: 4)")
    return cli


def timed(engine: Engine, shards: list[Shard]) -> dict[str, Any]:
    results: list[UnitResult] = []
    started = time.perf_counter()
    engine.run(shards, lambda _, done: results.extend(done))
    seconds = time.perf_counter() - started
    failed = [result.error for result in results if result.error is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} sentences failed, e.g. {failed[0]}")
    sentences = sum(result.sentences for result in results)
    return {
        "seconds": round(seconds, 2),
        "sentences": sentences,
        "sentences_per_s": round(sentences / seconds, 2),
    }


def run(model_dir: Path, count: int, say: Any, beams: int = 4) -> dict[str, Any]:
    from transformers import AutoTokenizer

    standin = is_standin(model_dir)
    sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), count)
    units = [
        Unit(0, index, sentence.source, forced_tokens=sentence.reference_tokens if standin else None)
        for index, sentence in enumerate(sentences)
    ]
    # A smoke run still gives every actor shards.
    shards = cut_shards(units, ShardBudget(max_units=8) if count <= QUICK_SENTENCES else ShardBudget())
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as workdir:
        store, name = archive_with("int8", model_dir, Path(workdir))
        archive, options = store / name, JobOptions(beams=beams)
        runs: dict[str, Any] = {}
        say(f"in process: {len(units)} sentences in {len(shards)} shards")
        runs["in_process"] = timed(LocalEngine(archive, options), shards)
        started = time.perf_counter()
        with ray_session(None):
            ray_start = round(time.perf_counter() - started, 2)
            say(f"Ray local started in {ray_start}s; one actor")
            runs["ray_one_actor"] = timed(RayEngine(archive, options, threads=1, actors=1), shards)
            say(f"one actor per core ({host_cpus()})")
            runs["ray_per_core"] = timed(RayEngine(archive, options, threads=1), shards)
    rate = {name: figures["sentences_per_s"] for name, figures in runs.items()}
    return {
        "model": str(model_dir),
        "standin": standin,
        "output_lengths": "reference lengths (stand-in, forced for benchmarking only)"
        if standin
        else "natural",
        "n": len(units),
        "num_beams": beams,
        "shards": len(shards),
        "cpus": host_cpus(),
        "sentence_cache": "off",
        "ray_start_seconds": ray_start,
        "runs": runs,
        "ratios": {
            "ray_one_actor_vs_in_process": round(rate["ray_one_actor"] / rate["in_process"], 3),
            "ray_per_core_vs_in_process": round(rate["ray_per_core"] / rate["in_process"], 3),
        },
    }


def markdown(result: dict[str, Any]) -> str:
    rows = [
        f"| {name} | {figures['sentences']} | {figures['seconds']} | {figures['sentences_per_s']} |"
        for name, figures in result["runs"].items()
    ]
    ratios = ", ".join(f"{name} {value}" for name, value in result["ratios"].items())
    return "\n".join(
        [
            f"Batch throughput, {result['n']} sentences, output lengths: {result['output_lengths']}",
            "",
            "| run | sentences | seconds | sentences/s |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            f"ratios: {ratios}; Ray started in {result['ray_start_seconds']} s (not in the runs)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    cli = command()
    args = cli.parse(argv)
    count = QUICK_SENTENCES if args.quick else args.sentences
    result = run(cli.model_dir(), count, cli.say, args.beams)
    path = cli.write("batch_throughput", result)
    print(markdown(result))
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
