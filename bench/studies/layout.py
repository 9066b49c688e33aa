"""The shipped policy's layout by measurement: sweep step partitions x threads x row budget, keep the winner.

    python -m bench.studies.layout [--variant int8] [--partitions 1 2] [--threads 1 2]
                                   [--max-batch-rows 32 64 128] [--num-beams default 1] [--users 100]
                                   [--duration 20s] [--model synthetic|hub id|dir] [--quick]

Every point of the grid is a real deployment of what ships (TorchServe's continuous batching, one
worker that forks `step_partitions` processes, each stepping its own running batch): the variant's
model-config yaml with the point's step_partitions, threads and max_batch_rows (the sentence cache
off, so it runs cold), packed by the real archiver into a temporary model store, served by a fresh
TorchServe on free loopback ports, loaded by Locust (bench.load: 100 users, no wait,
reference-length outputs on the stand-in), then stopped.

The default grid: every split of the cores into partitions x threads (2 cores: 2 x 1 and 1 x 2) and
row budgets 32, 64 and 128 per partition, at the model's own decode (beam 4): 6 points, about 8
minutes for the full-size model on 2 cores. Given --partitions/--threads, their cross product is
measured, less the pairs over the cores (--oversubscribe keeps them).

Progress goes to stderr; stdout gets the table sorted by req/s and the winner as a model-config
snippet. Writes <name>.json, .md and .png (name: layout, or layout-quick) into the run's own folder
(bench/results/runs/...). The winner is the highest req/s of the first --num-beams decode among
points without a failed request. Until commit 96674ee this swept the static batches' layout
(workers x threads x batch size x row budget); its last result is bench/studies/results/layout.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path
from typing import Any

import yaml

from archive.build import CONFIG_DIR, MODEL_NAME, ArchiveSpec, build_archive, model_digest
from archive.tatoeba import REPO_ROOT
from bench.cli import BenchCli, Progress
from bench.common import CACHE_OFF, DEFAULT_MODEL, is_standin
from bench.load import LoadSpec, run_load
from bench.process_memory import host_memory_mb, memory_mb, ready_worker_pids
from bench.studies.layout_report import (
    decode_label,
    markdown_table,
    plot,
    point_name,
    winning_config,
    write_markdown,
)
from handlers.handler_config import DECODER_NAMES, DecoderName, HandlerConfig
from serving.client import ServerError
from serving.processes import process_alive
from serving.torchserve import TorchServe

# One full-size int8 point besides its Locust run time (AMD EPYC, 2 shared cores, 2026-11-22, static
# batches): build 1-1.5 s, the worker loading, quantizing and warming up (~20 s), Locust's setup and
# its wait for the requests in flight (up to its 30 s stop timeout), stop. Only for the estimate
# printed before a sweep.
OVERHEAD_S = 55.0
say = Progress("layout")


@dataclass(frozen=True)
class Point:
    partitions: int
    threads: int
    max_batch_rows: int

    @property
    def name(self) -> str:
        return point_name(asdict(self))


@dataclass(frozen=True)
class Plan:
    """The grid's axes and the load at each point; --quick swaps in a smoke-sized one."""

    # Empty: every split of the cores, partitions x threads = cores (2 cores: 2 x 1 and 1 x 2).
    partitions: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    rows: tuple[int, ...] = (32, 64, 128)
    users: int = 100
    duration: str = "20s"
    sentences: int = 2000
    name: str = "layout"


FULL = Plan()
QUICK = Plan(
    partitions=(1,),
    threads=(1,),
    rows=(8, 32),
    users=4,
    duration="4s",
    sentences=50,
    name="layout-quick",
)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def model_beams(model_dir: Path) -> int:
    """The model's own num_beams (generation_config.json), what a request without num_beams gets."""
    path = model_dir / "generation_config.json"
    return int(json.loads(path.read_text()).get("num_beams", 1)) if path.exists() else 1


def layouts(plan: Plan, cores: int, oversubscribe: bool) -> tuple[list[tuple[int, int]], list[str]]:
    """(partitions, threads) pairs: the plan's cross product within the cores, or every split of them."""
    if not plan.partitions and not plan.threads:
        return [(p, cores // p) for p in range(1, cores + 1) if cores % p == 0], []
    pairs, skipped = [], []
    for partitions, threads in product(
        sorted(set(plan.partitions or (1,))), sorted(set(plan.threads or (1,)))
    ):
        if partitions * threads > cores and not oversubscribe:
            skipped.append(f"{partitions} partitions x {threads} threads: more than the {cores} cores")
        else:
            pairs.append((partitions, threads))
    return pairs, skipped


def grid(plan: Plan, cores: int, oversubscribe: bool = False) -> tuple[list[Point], list[str]]:
    """The points worth measuring, and a line for each pair of the cores left out."""
    pairs, skipped = layouts(plan, cores, oversubscribe)
    return [Point(p, t, rows) for (p, t), rows in product(pairs, sorted(set(plan.rows)))], skipped


def layout_config(base: dict[str, Any], point: Point, decoder: DecoderName | None = None) -> dict[str, Any]:
    """The variant's model config with the point's layout, every other key kept.

    Its handler section goes through HandlerConfig first: a bad value fails here, not in a worker.
    """
    handler = {
        **(base.get("handler") or {}),
        **CACHE_OFF,  # measured cold: Locust's repeated sentences must reach the model
        "step_partitions": point.partitions,
        "threads": point.threads,
        "max_batch_rows": point.max_batch_rows,
    }
    if decoder is not None:
        handler["decoder"] = decoder
    HandlerConfig.from_mapping(handler)
    return {**base, "handler": handler}


@dataclass(frozen=True)
class Sweep:
    """What stays fixed across the points: the variant's config and model, the decodes, the load."""

    variant: str
    model_dir: Path
    base: dict[str, Any]
    decodes: tuple[int | None, ...]
    plan: Plan
    decoder: DecoderName | None = None


def read_base_config(config_dir: Path, variant: str) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((config_dir / f"{MODEL_NAME}_{variant}.yaml").read_text())
    return raw


def measure(sweep: Sweep, point: Point, digest: str) -> dict[str, Any]:
    """Build, serve, load and stop one point; a point that fails to start is recorded, not fatal."""
    started = time.monotonic()
    row: dict[str, Any] = {"point": asdict(point), "load_average_at_start": _load_average()}
    with tempfile.TemporaryDirectory(prefix="zh_en_layout_") as tmp:
        config_dir, store = Path(tmp) / "config", Path(tmp) / "store"
        config_dir.mkdir()
        config = layout_config(sweep.base, point, sweep.decoder)
        (config_dir / f"{MODEL_NAME}_{sweep.variant}.yaml").write_text(
            f"# generated by bench.studies.layout: {point.name}\n" + yaml.safe_dump(config, sort_keys=False)
        )
        spec = ArchiveSpec(sweep.variant, sweep.model_dir, store, config_dir)
        build_archive(spec, digest)
        row["build_s"] = round(time.monotonic() - started, 1)
        try:
            with TorchServe(store, Path(tmp) / "server", models=[spec.mar_path.name]) as server:
                pids = ready_worker_pids(server)
                row["ready_s"] = round(time.monotonic() - started - row["build_s"], 1)
                row.update(_serve_and_load(sweep, server, pids, Path(tmp) / "load"))
        except (TimeoutError, ServerError, subprocess.CalledProcessError, SystemExit) as error:
            row["error"] = f"{type(error).__name__}: {error}"
    row["total_s"] = round(time.monotonic() - started, 1)
    return row


def _serve_and_load(sweep: Sweep, server: TorchServe, pids: list[int], results: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {"ready_workers": len(pids), "memory_after_load": host_memory_mb(pids)}
    loads = []
    for beams in sweep.decodes:
        spec = LoadSpec(
            server.client.endpoints.inference,
            users=sweep.plan.users,
            spawn_rate=sweep.plan.users,
            duration=sweep.plan.duration,
            num_beams=beams,
            key_file=server.key_file,
            sentences=sweep.plan.sentences,
            label=f"layout-{decode_label(beams)}",
        )
        with contextlib.redirect_stdout(sys.stderr):  # stdout is kept for the table and the winner
            summary = run_load(spec, results, sweep.model_dir)
        loads.append({key: summary[key] for key in LOAD_KEYS} | {"decode": decode_label(beams)})
    alive = [pid for pid in pids if process_alive(pid)]  # a worker that died is restarted, not measured
    java = server.java_pid()
    figures.update(
        loads=loads,
        workers_died=len(pids) - len(alive),
        memory_after_runs=host_memory_mb(alive),
        frontend_rss_mb=memory_mb(java)["rss_mb"] if java else None,
        standin=loads[0]["standin"] if loads else None,
    )
    return figures


LOAD_KEYS = ("requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "num_beams", "standin")


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def winner(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The highest req/s at the first decode (then the lower p95) among the points that served cleanly."""
    clean = [row for row in rows if _served_cleanly(row)]
    return max(clean, key=lambda r: (r["loads"][0]["rps"], -r["loads"][0]["p95_ms"]), default=None)


def _served_cleanly(row: dict[str, Any]) -> bool:
    """Started, answered every request it got (and got some), and no worker died on the way."""
    if "error" in row or not row["loads"] or row.get("workers_died", 0):
        return False
    return all(load["failures"] == 0 and load["requests"] > 0 for load in row["loads"])


def parse_beams(value: str) -> int | None:
    return None if value == "default" else int(value)


def command() -> BenchCli:
    cli = BenchCli("studies.layout", __doc__, model=DEFAULT_MODEL, strict=True, results_dir=True)
    parser = cli.parser
    parser.add_argument("--variant", choices=("int8", "fp32"), default="int8")
    parser.add_argument("--partitions", type=int, nargs="+", help="default: every split of the cores")
    parser.add_argument(
        "--threads", type=int, nargs="+", help="intra-op threads per partition (default: as above)"
    )
    parser.add_argument("--max-batch-rows", type=int, nargs="+", help=f"row budget, default {FULL.rows}")
    parser.add_argument(
        "--num-beams",
        type=parse_beams,
        nargs="+",
        default=[None],
        help="decodes per point, 'default' = the model's own (the winner is picked on the first)",
    )
    parser.add_argument("--decoder", choices=DECODER_NAMES, help="default: the yaml's")
    parser.add_argument("--users", type=int, help=f"Locust users, default {FULL.users}")
    parser.add_argument("--duration", help=f"Locust run time per decode and point, default {FULL.duration}")
    parser.add_argument("--cores", type=int, default=usable_cores(), help="default: this machine's")
    parser.add_argument("--oversubscribe", action="store_true", help="keep partitions x threads > cores")
    parser.add_argument("--config-dir", type=Path, default=CONFIG_DIR, help="where zh_en_<variant>.yaml is")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 points, 4 users, 4 s")
    parser.add_argument("--name", help="results file name (default: layout, or layout-quick)")
    return cli


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return command().parse(argv)


def plan_of(args: argparse.Namespace) -> Plan:
    """--quick or the full plan, with any axis or load setting given on the command line."""
    plan = QUICK if args.quick else FULL
    return Plan(
        partitions=tuple(args.partitions or plan.partitions),
        threads=tuple(args.threads or plan.threads),
        rows=tuple(args.max_batch_rows or plan.rows),
        users=args.users or plan.users,
        duration=args.duration or plan.duration,
        sentences=plan.sentences,
        name=args.name or plan.name,
    )


def run(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    plan = plan_of(args)
    beams, decodes = model_beams(model_dir), tuple(args.num_beams)
    points, skipped = grid(plan, args.cores, args.oversubscribe)
    base_path = args.config_dir / f"{MODEL_NAME}_{args.variant}.yaml"
    base = read_base_config(args.config_dir, args.variant)
    sweep = Sweep(args.variant, model_dir, base, decodes, plan, args.decoder)
    checked = [HandlerConfig.from_mapping(layout_config(base, p, args.decoder)["handler"]) for p in points]
    per_point = _seconds(plan.duration) * len(decodes) + OVERHEAD_S
    say(
        f"{len(points)} points x {len(decodes)} decode(s), {args.variant}, {args.cores} cores, "
        f"{plan.users} users x {plan.duration}; full-size model: about {len(points) * per_point / 60:.0f} min"
    )
    for line in skipped:
        say(f"left out: {line}")
    started = time.monotonic()
    rows = _measure_all(sweep, points, model_digest(model_dir))
    return {
        "name": plan.name,
        "variant": args.variant,
        "model": str(model_dir),
        "standin": is_standin(model_dir),
        "model_beams": beams,
        "decodes": list(decodes),
        "decoder": checked[0].decoder if checked else args.decoder,
        "base_config": _shown(base_path),
        "max_batch_delay_ms": sweep.base.get("maxBatchDelay"),
        "users": plan.users,
        "duration": plan.duration,
        "cores": args.cores,
        "skipped": skipped,
        "elapsed_s": round(time.monotonic() - started, 1),
        "points": rows,
        "winner": winner(rows),
    }


def _measure_all(sweep: Sweep, points: Sequence[Point], digest: str) -> list[dict[str, Any]]:
    started, rows = time.monotonic(), []
    for index, point in enumerate(points, start=1):
        say(f"[{index}/{len(points)}] {point.name}: building, starting, loading ...")
        rows.append(measure(sweep, point, digest))
        left = (time.monotonic() - started) / index * (len(points) - index)
        say(f"[{index}/{len(points)}] {point.name}: {_outcome(rows[-1])} (~{left:.0f}s to go)")
    return rows


def _outcome(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"FAILED TO SERVE: {row['error'][:200]}"
    parts = [
        f"{load['decode']} {load['rps']} req/s, p50 {load['p50_ms']:.0f} ms, p95 {load['p95_ms']:.0f} ms, "
        f"{load['failures']} failed"
        for load in row["loads"]
    ]
    memory = row["memory_after_runs"]
    return "; ".join(parts) + f"; PSS {memory['pss_mb']} MB over {memory['processes']} processes"


def _shown(path: Path) -> str:
    """A path relative to the repository where it lies inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]] if duration[-1] in units else float(duration)


def main(argv: list[str] | None = None) -> int:
    cli = command()
    args = cli.parse(argv)
    result = run(args, cli.model_dir())
    out = args.results_dir
    path = cli.write(result["name"], result)
    result = json.loads(path.read_text())  # with the date, machine and signature write_result adds
    figure = plot(result, out)
    report = write_markdown(result, out, figure)
    print(markdown_table(result))
    print(f"\nWinning model-config values (config/{MODEL_NAME}_{result['variant']}.yaml):\n")
    print(winning_config(result))
    written = ", ".join(str(p) for p in (path, report, figure) if p is not None)
    say(f"written: {written}")
    return 0 if result["winner"] is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
