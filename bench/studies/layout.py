"""Worker layout by measurement: sweep workers x threads x batch size x row budget, keep the winner.

    python -m bench.studies.layout [--variant int8] [--workers 1 2] [--threads 1 2] [--batch-size 8 16]
                                   [--max-batch-rows 16 32 64] [--num-beams default 1] [--users 100]
                                   [--duration 20s] [--model synthetic|hub id|dir] [--quick]

Every point of the grid is a real deployment: the variant's model-config yaml with that layout
(minWorkers/maxWorkers, batchSize, handler threads and max_batch_rows; the sentence cache off, so
it runs cold), packed by the real archiver
into a temporary model store, served by a fresh TorchServe on free loopback ports, loaded by Locust
(bench.load: 100 users, no wait, reference-length outputs on the stand-in), then stopped.

The default grid: every split of the cores into workers x threads (2 cores: 2 x 1 and 1 x 2), batch
sizes 8 and 16, row budgets 16, 32 and 64, at the model's own decode (beam 4): 10 points, about 13
minutes for the full-size model on 2 cores. Given --workers/--threads, their cross product is
measured, less the pairs over the cores (--oversubscribe keeps them). Row budgets no batch can reach
are skipped: Locust sends one text per request, so a batch of B requests at N beams is B x N rows,
and any budget above that decodes the same way.

Progress goes to stderr; stdout gets the table sorted by req/s and the winner as a model-config
snippet. Writes <results-dir>/<name>.json, .md and .png (name: layout, or layout-quick; the directory
defaults to bench/studies/results, where the shipped config's measurement is kept). The winner is the
highest req/s of the first --num-beams decode among points without a failed request.

A finished study kept as a tool (`make layout`): operators run it on the host they deploy to.
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
from bench.common import CACHE_OFF, DEFAULT_MODEL, STUDIES_RESULTS_DIR, is_standin
from bench.load import LoadSpec, run_load
from bench.process_memory import memory_mb, peak_mb, ready_worker_pids, workers_memory
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

# One full-size int8 point besides its Locust run time (AMD EPYC, 2 shared cores, 2026-11-22): build
# 1-1.5 s, workers loading, quantizing and warming up (~20 s), Locust's setup and its wait for the
# requests still in flight (up to its 30 s stop timeout), stop: 48 s at 2 x 1, ~60 s at 1 x 2 (p95
# 41 s at beam 4). Only for the estimate printed before a sweep.
OVERHEAD_S = 55.0
say = Progress("layout")


@dataclass(frozen=True)
class Point:
    workers: int
    threads: int
    batch_size: int
    max_batch_rows: int

    @property
    def name(self) -> str:
        return point_name(asdict(self))


@dataclass(frozen=True)
class Plan:
    """The grid's axes and the load at each point; --quick swaps in a smoke-sized one."""

    # Empty: every split of the cores, workers x threads = cores (2 cores: 2 x 1 and 1 x 2).
    workers: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    batch_sizes: tuple[int, ...] = (8, 16)
    rows: tuple[int, ...] = (16, 32, 64)
    users: int = 100
    duration: str = "20s"
    sentences: int = 2000
    name: str = "layout"


FULL = Plan()
QUICK = Plan(
    workers=(1,),
    threads=(1,),
    batch_sizes=(8,),
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
    """(workers, threads) pairs: the plan's cross product within the cores, or every split of them."""
    if not plan.workers and not plan.threads:
        return [(w, cores // w) for w in range(1, cores + 1) if cores % w == 0], []
    pairs, skipped = [], []
    for workers, threads in product(sorted(set(plan.workers or (1,))), sorted(set(plan.threads or (1,)))):
        if workers * threads > cores and not oversubscribe:
            skipped.append(f"{workers} workers x {threads} threads: more than the {cores} cores")
        else:
            pairs.append((workers, threads))
    return pairs, skipped


def grid(
    plan: Plan, max_beams: int, cores: int, oversubscribe: bool = False
) -> tuple[list[Point], list[str]]:
    """The points worth measuring, and a line for each kind of point left out."""
    pairs, skipped_layouts = layouts(plan, cores, oversubscribe)
    points: list[Point] = []
    skipped = dict.fromkeys(skipped_layouts)  # ordered and without repeats
    for (workers, threads), batch in product(pairs, sorted(set(plan.batch_sizes))):
        reached: set[int] = set()
        for rows in sorted(set(plan.rows)):
            effective = min(rows, batch * max_beams)
            if effective in reached:
                skipped[
                    f"batch {batch}, rows {rows}: same as rows {effective} "
                    f"(a batch is at most {batch} x {max_beams} beams = {batch * max_beams} rows)"
                ] = None
                continue
            reached.add(effective)
            points.append(Point(workers, threads, batch, rows))
    return points, list(skipped)


def layout_config(base: dict[str, Any], point: Point, decoder: DecoderName | None = None) -> dict[str, Any]:
    """The variant's model config with the point's layout, every other key kept.

    Its handler section goes through HandlerConfig first: a bad value fails here, not in a worker.
    """
    handler = {
        **(base.get("handler") or {}),
        **CACHE_OFF,  # measured cold: Locust's repeated sentences must reach the model
        "threads": point.threads,
        "max_batch_rows": point.max_batch_rows,
    }
    if decoder is not None:
        handler["decoder"] = decoder
    HandlerConfig.from_mapping(handler)
    return {
        **base,
        "minWorkers": point.workers,
        "maxWorkers": point.workers,
        "batchSize": point.batch_size,
        "handler": handler,
    }


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
    figures: dict[str, Any] = {"ready_workers": len(pids), "memory_after_load": _memory(pids)}
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
    peaks = [peak for pid in alive if (peak := peak_mb(pid)) is not None]
    java = server.java_pid()
    figures.update(
        loads=loads,
        workers_died=len(pids) - len(alive),
        memory_after_runs=_memory(alive),
        peak_worker_mb=max(peaks, default=None),
        frontend_rss_mb=memory_mb(java)["rss_mb"] if java else None,
        standin=loads[0]["standin"] if loads else None,
    )
    return figures


LOAD_KEYS = ("requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "num_beams", "standin")


def _memory(pids: Sequence[int]) -> dict[str, Any]:
    """Mean resident memory per worker (private + file-backed) and the workers' private total."""
    figures = workers_memory(pids)
    per_worker = {
        f"{key}_per_worker": figures[key] for key in ("rss_mb", "private_mb", "file_mb") if key in figures
    }
    return per_worker | (
        {"private_mb_total": figures["private_mb_total"]} if "private_mb_total" in figures else {}
    )


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
    parser.set_defaults(results_dir=STUDIES_RESULTS_DIR)  # beside the measurement the docs cite
    parser.add_argument("--variant", choices=("int8", "fp32"), default="int8")
    parser.add_argument("--workers", type=int, nargs="+", help="default: every split of the cores")
    parser.add_argument(
        "--threads", type=int, nargs="+", help="intra-op threads per worker (default: as above)"
    )
    parser.add_argument("--batch-size", type=int, nargs="+", help=f"default {FULL.batch_sizes}")
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
    parser.add_argument("--oversubscribe", action="store_true", help="keep workers x threads > cores")
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
        workers=tuple(args.workers or plan.workers),
        threads=tuple(args.threads or plan.threads),
        batch_sizes=tuple(args.batch_size or plan.batch_sizes),
        rows=tuple(args.max_batch_rows or plan.rows),
        users=args.users or plan.users,
        duration=args.duration or plan.duration,
        sentences=plan.sentences,
        name=args.name or plan.name,
    )


def run(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    plan = plan_of(args)
    beams, decodes = model_beams(model_dir), tuple(args.num_beams)
    points, skipped = grid(plan, max(b or beams for b in decodes), args.cores, args.oversubscribe)
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
    memory = row["memory_after_runs"].get("private_mb_per_worker", "?")
    return "; ".join(parts) + f"; {row['ready_workers']} worker(s), {memory} MB private each"


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
