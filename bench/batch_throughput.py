"""Batch prediction's throughput: the batch job's engines on one corpus, and the ratio to the server.

    python -m bench.batch_throughput                 # 20,000 unique sentences, the full-size stand-in
    python -m bench.batch_throughput --quick         # a smoke run

The corpus is the Tatoeba test set's sources made unique: after the 9,892 distinct ones, passes
prefixed "2. ", "3. ", ... until `--sentences` (a repeat would be decoded once by the job and every
time by the server, whose cache the benches turn off). They go through the same int8 archive
(config/zh_en_int8.yaml, sentence cache off), cut into the job's shards (batch.shards) and
translated four ways:
- local_per_core: batch.engines.LocalEngine, one worker process per core (the default on one host);
- ray_per_core: batch.engines.RayEngine, one actor per core (the default on a cluster);
- in_process and ray_one_actor, on the first `--overhead-sentences`: one worker in this process
  and one Ray actor, the same layout, so their ratio is what Ray Data costs.
Each run reports its whole time (every worker's model load inside; Ray's own start apart), its
rate with one model load (timed apart, in process) taken off, and for the local engines how busy
the cores were (CPU time of the bench and its workers over wall time x workers). The one-worker
runs also report their rate with their engine's whole start-up taken off (one sentence through a
fresh engine: a Ray actor's process and imports too), and each Ray run has a session of its own.
With a Locust run of the int8 server at the same beams and 100 users in the same results folder
(make bench's load step, and bench.run_all's second one once the job has run), the report sets the
job beside them.
On the offline stand-in every output is forced to its reference translation's token length
(batch.units.Unit.forced_tokens, for benchmarks only), as bench.latency does, so that decode work
matches the real model's; results say so under "output_lengths".
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from batch.engines import Engine, LocalEngine, RayEngine, host_cpus, ray_session, workers_for
from batch.shards import Shard, ShardBudget, cut_shards
from batch.units import JobOptions, Unit
from bench.cli import BenchCli
from bench.common import archive_with, is_standin, sample_sentences, unique_sentences
from bench.report import batch_runs_table

DEFAULT_SENTENCES = 20_000
OVERHEAD_SENTENCES = 2_000
QUICK_SENTENCES = 24
DEFAULT_BEAMS = 4  # the served load the report sets the job beside runs at these beams


def command() -> BenchCli:
    cli = BenchCli("batch_throughput", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=DEFAULT_SENTENCES)
    cli.parser.add_argument(
        "--overhead-sentences",
        type=int,
        default=OVERHEAD_SENTENCES,
        help="the one-worker runs (in process, one Ray actor) take the first this many",
    )
    cli.parser.add_argument("--quick", action="store_true", help=f"{QUICK_SENTENCES} sentences (smoke run)")
    cli.parser.add_argument(
        "--beams", type=int, default=DEFAULT_BEAMS, help="num_beams (bench.load's served rung: 4)"
    )
    return cli


def timed(
    engine: Engine, shards: list[Shard], load_seconds: float, say: Any, start_up: float | None = None
) -> dict[str, Any]:
    """The run's whole time and rate, its rate once a model load is taken off, its rate once the
    engine's whole start-up (`start_up`, see start_up_seconds) is, and (local engines) how busy its
    cores were: CPU time of this process and its workers over wall time x workers."""
    total = sum(len(shard.units) for shard in shards)
    counts = {"units": 0, "sentences": 0}
    started, cpu_before = time.perf_counter(), _cpu_seconds()

    def done(_: Shard, results: list[Any]) -> None:
        failed = [result.error for result in results if result.error is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} sentences failed, e.g. {failed[0]}")
        counts["units"] += len(results)
        counts["sentences"] += sum(result.sentences for result in results)
        rate = counts["sentences"] / (time.perf_counter() - started)
        say(f"  {counts['units']}/{total} units, {rate:.1f} sentences/s since the start")

    engine.run(shards, done)
    seconds = time.perf_counter() - started
    sentences = counts["sentences"]
    return {
        "seconds": round(seconds, 2),
        "units": counts["units"],
        "sentences": sentences,
        "sentences_per_s": round(sentences / seconds, 2),
        # Workers load at once, each on its own core: one load's time comes off the run.
        "sentences_per_s_after_load": round(sentences / (seconds - load_seconds), 2)
        if seconds > 2 * load_seconds
        else None,
        **(
            {
                "start_up_seconds": start_up,
                "sentences_per_s_after_start_up": round(sentences / (seconds - start_up), 2),
            }
            if start_up is not None and seconds > 2 * start_up
            else {}
        ),
        "cpu_seconds_here_and_children": round(_cpu_seconds() - cpu_before, 2),
    }


def _cpu_seconds() -> float:
    """User + system CPU of this process and its finished children (a local engine's workers;
    Ray's actors are the raylet's children and not counted)."""
    here, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return here.ru_utime + here.ru_stime + children.ru_utime + children.ru_stime


def _busy(run: dict[str, Any], workers: int) -> float:
    cpu, wall = float(run["cpu_seconds_here_and_children"]), float(run["seconds"])
    return round(cpu / (wall * workers), 3)


def start_up_seconds(engine: Engine, unit: Unit) -> float:
    """What a fresh engine of this kind takes to translate one sentence: its workers' start (a Ray
    actor's process and its imports of torch and transformers, which this process had done before
    the in-process engine's run), the model load, Ray's scheduling, and one short decode."""
    started = time.perf_counter()
    engine.run([Shard(0, (unit,))], lambda _shard, _results: None)
    return round(time.perf_counter() - started, 2)


def model_load_seconds(archive: Path, options: JobOptions) -> float:
    """One worker's load of the archive (read, quantize, warm up), in this process, its modules
    (torch, transformers) already imported."""
    from batch.engine import UnitTranslator

    started = time.perf_counter()
    UnitTranslator(archive, options)
    return round(time.perf_counter() - started, 2)


def ratios_of(runs: dict[str, Any]) -> dict[str, float]:
    """Ray against local on the same shards, over the whole run and, where both runs are long enough
    to take one model load off (not a smoke run), at steady state."""
    rate = {name: figures["sentences_per_s"] for name, figures in runs.items()}
    ratios = {
        "ray_one_actor_vs_in_process": round(rate["ray_one_actor"] / rate["in_process"], 3),
        "ray_per_core_vs_local_per_core": round(rate["ray_per_core"] / rate["local_per_core"], 3),
    }
    steady = {name: figures["sentences_per_s_after_load"] for name, figures in runs.items()}
    if steady["ray_one_actor"] and steady["in_process"]:
        ratios["ray_one_actor_vs_in_process_after_load"] = round(
            steady["ray_one_actor"] / steady["in_process"], 3
        )
    started = {name: figures.get("sentences_per_s_after_start_up") for name, figures in runs.items()}
    if started["ray_one_actor"] and started["in_process"]:
        ratios["ray_one_actor_vs_in_process_after_start_up"] = round(
            started["ray_one_actor"] / started["in_process"], 3
        )
    return ratios


def run(model_dir: Path, count: int, overhead_count: int, say: Any, beams: int = 4) -> dict[str, Any]:
    from transformers import AutoTokenizer

    standin = is_standin(model_dir)
    tatoeba = sample_sentences(AutoTokenizer.from_pretrained(model_dir), count)  # seeded order
    corpus = unique_sentences(tatoeba, count)
    units = [
        Unit(0, index, sentence.source, forced_tokens=sentence.reference_tokens if standin else None)
        for index, sentence in enumerate(corpus)
    ]
    # A smoke run still gives every worker shards; the job runs its shards longest first.
    budget = ShardBudget(max_units=8) if count <= QUICK_SENTENCES else ShardBudget()
    shards = cut_shards(units, budget)[::-1]
    few = cut_shards(units[:overhead_count], budget)[::-1]
    per_core = workers_for(1)
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as workdir:
        store, name = archive_with("int8", model_dir, Path(workdir))
        archive, options = store / name, JobOptions(beams=beams)
        load = model_load_seconds(archive, options)
        say(f"one model load: {load}s (timed apart, in this process)")
        runs: dict[str, Any] = {}
        say(f"local, one worker per core ({per_core}): {len(units)} sentences in {len(shards)} shards")
        runs["local_per_core"] = timed(LocalEngine(archive, options, per_core), shards, load, say)
        runs["local_per_core"]["cpu_busy"] = _busy(runs["local_per_core"], per_core)
        say(f"in process: the first {len(units[:overhead_count])} sentences in {len(few)} shards")
        local_start = start_up_seconds(LocalEngine(archive, options), units[0])
        runs["in_process"] = timed(LocalEngine(archive, options), few, load, say, local_start)
        runs["in_process"]["cpu_busy"] = _busy(runs["in_process"], 1)
        # Each Ray run in a session of its own, as a job has: an ended run's actor was seen still
        # holding its CPU in the session afterwards (scratch, AMD EPYC Zen 4, 2026-11-29).
        say(f"Ray, one actor per core ({per_core}), every shard")
        started = time.perf_counter()
        with ray_session(None):
            ray_start = round(time.perf_counter() - started, 2)
            say(f"Ray local started in {ray_start}s")
            runs["ray_per_core"] = timed(RayEngine(archive, options, threads=1), shards, load, say)
        with ray_session(None):
            ray_start_up = start_up_seconds(RayEngine(archive, options, threads=1, actors=1), units[0])
        say(f"one sentence through a fresh engine: {local_start}s in process, {ray_start_up}s on Ray")
        say(f"Ray, one actor, the same {len(few)} shards as in process")
        with ray_session(None):
            runs["ray_one_actor"] = timed(
                RayEngine(archive, options, threads=1, actors=1), few, load, say, ray_start_up
            )
    return {
        "model": str(model_dir),
        "standin": standin,
        "output_lengths": "reference lengths (stand-in, forced for benchmarking only)"
        if standin
        else "natural",
        "n": len(units),
        "n_one_worker": len(units[:overhead_count]),
        "corpus": "Tatoeba zho-eng test sources made unique (passes prefixed '2. ', '3. ', ...)",
        "num_beams": beams,
        "shards": len(shards),
        "shard_budget": {"max_units": budget.max_units, "max_chars": budget.max_chars},
        "cpus": host_cpus(),
        "workers_per_core_run": per_core,
        "sentence_cache": "off",
        "model_load_seconds": load,
        "ray_start_seconds": ray_start,
        "runs": runs,
        "ratios": ratios_of(runs),
    }


def markdown(result: dict[str, Any]) -> str:
    ratios = ", ".join(f"{name} {value}" for name, value in result["ratios"].items())
    return "\n".join(
        [
            f"Batch throughput, {result['n']} sentences, output lengths: {result['output_lengths']}",
            "",
            *batch_runs_table(result["runs"]),
            "",
            f"ratios: {ratios}; one model load {result['model_load_seconds']} s (in the runs); "
            f"Ray started in {result['ray_start_seconds']} s (not in the runs)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    cli = command()
    args = cli.parse(argv)
    count = QUICK_SENTENCES if args.quick else args.sentences
    overhead = min(count, args.overhead_sentences)
    result = run(cli.model_dir(), count, overhead, cli.say, args.beams)
    path = cli.write("batch_throughput", result)
    print(markdown(result))
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
