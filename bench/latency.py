"""The latency ladder: what each step of the playbook buys, measured in one run on the same sentences.

    python -m bench.latency [--model synthetic|hub id|dir] [--sentences 30] [--beams 1 4] [--http]
                            [--no-peer] [--quick] [--results-dir DIR]

Rungs (1 intra-op thread each):
  1. fp32, every input padded to a fixed 128 tokens (the naive baseline)
  2. fp32, dynamic shapes (one sentence, padded only to its next multiple of 8)
  3. int8, dynamic shapes
  4. int8, dynamic shapes, batches of 16 padded to their longest (what server-side batching does)
  5. with --http: the same sentences one at a time through a real TorchServe serving the int8 archive
     (packed from --model with the sentence cache off, so the rung runs cold)
  6. peer: CTranslate2 int8 on the same weights, one sentence at a time
  7. peer: CTranslate2 int8, batches of 16
  8. int8, one sentence, transformers' generate() (`decoder: generate`), what rung 3's fast decoder replaces
  9. int8, batches of 16, generate()
 10. int8, batches of 16, each sentence to its own length (what the server's fast decoder does)
 11. peer: CTranslate2 int8 with the target-side vocabulary map (use_vmap), one sentence at a time
 12. peer: CTranslate2 int8 with the map, batches of 16
Rungs 1-4 and 6-14 are defined and measured in bench.ladder_rungs; this module runs the ladder and rung 5.
Rungs 2-4 use the default fast decoder (handlers.model.decoding: the target-side output layer, our own loops).
Rungs 6, 7, 11 and 12 are a benchmark to measure against, never a serving option (bench.ctranslate2_peer
converts the model at bench time, cached under build/ct2/); they need the `bench` extra's
ctranslate2, are left out with a message where it is missing, and --no-peer leaves them out.
Each in-process rung runs in its own spawned process, so its memory is its own: RSS after load + gc
and the process's peak RSS (for int8 the peak includes the fp32 weights loaded before quantizing).
--quick (a smoke run) forks the rungs from one process that imported the bench instead, so their
RSS figures are not their own, and the result's notes say so.
On the offline stand-in every output is forced to its reference translation's token length (a
batch: its longest), so timings transfer to the real model; a real model decodes naturally.
Writes <results-dir>/latency.json and prints a markdown table; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from bench.cli import BenchCli, Progress
from bench.common import DEFAULT_MODEL, Sentence, archive_with, is_standin, percentiles
from bench.ladder_rungs import (
    BATCH,
    GENERATE_RUNGS,
    HTTP_RUNG,
    LADDER,
    MAPPED_PEER_RUNGS,
    ONEDNN_RUNGS,
    OWN_LENGTHS_RUNG,
    PEER_RUNGS,
    WARMUP,
    Rung,
    measure_in_process,
    options_for,
)
from bench.ladder_targets import http_overhead_ms, markdown, peer_ratios, targets
from bench.process_memory import ready_worker_pids, workers_memory

QUICK_SENTENCES = 16  # one full batch for rungs 4 and 7
QUICK_NOTE = "--quick: rungs forked from one process that imported the bench, so RSS is not each rung's own."
say = Progress("latency")

NOTES = (
    "RSS: after load + gc (before warm-up); run RSS: after the timed run; peak: the process's max RSS.",
    "int8 peak RSS includes the fp32 weights loaded before quantizing.",
    f"Rungs 4, 7, 9 and 10 latencies are per batch of {BATCH} (no per-sentence speedup): compare sent/s.",
    "Rungs 4, 7 and 9 force every sentence of a batch to the batch's longest reference (the same work for "
    "each engine); rung 10 lets each end at its own, as a real model's sentences end at their own eos.",
    "Memory targets use the steady state after the timed run: private (anonymous) and file-backed (the "
    "mmapped weights, shared by a model's workers and reclaimable).",
    "Rung 5 memory is per TorchServe worker (psutil / /proc on the worker pids, peak = VmHWM); "
    "serving overhead = rung 5 p50 - rung 3 p50.",
)
PEER_NOTE = (
    "Rungs 6-7, 11-12: CTranslate2 int8 on the same weights (peer, not a serving option): converted at "
    "bench time, 1 intra-op thread, its defaults (6-7) or with a vocabulary map listing every "
    "target-side piece, use_vmap (11-12: the restriction our output layer makes), lengths forced like "
    "ours; the ratios are ours / CTranslate2. Their RSS includes the harness every rung imports (Python, "
    "torch, transformers: harness_rss_mb in latency.json), so it is not CTranslate2's footprint alone."
)


def rung_processes(quick: bool) -> BaseContext:
    """How each in-process rung gets its process: spawned (its memory its own), or under --quick forked
    from one server that imported the bench once (a spawned rung spends about 7 s importing it)."""
    if not quick:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["bench.ladder_rungs"])
    return context


def _in_subprocess(
    processes: BaseContext,
    rung: Rung,
    model_dir: Path,
    sentences: list[Sentence],
    beams: int,
    converted: Path | None,
) -> dict[str, Any]:
    with processes.Pool(1, maxtasksperchild=1) as pool:
        result: dict[str, Any] = pool.apply(
            measure_in_process, (rung, model_dir, sentences, beams, converted)
        )
    return result


def request_bodies(sentences: Sequence[Sentence], beams: int, standin: bool) -> list[bytes]:
    """JSON bodies, encoded before timing so the client's own work stays out of the numbers."""
    bodies = []
    for sentence, option in zip(sentences, options_for(sentences, beams, standin), strict=True):
        fields = {k: v for k, v in asdict(option).items() if v is not None}
        bodies.append(json.dumps({"text": sentence.source, **fields}).encode())
    return bodies


def measure_http(model_dir: Path, sentences: list[Sentence], beams: int, standin: bool) -> dict[str, Any]:
    """One request at a time through a real server started from the production config.

    It serves the int8 archive packed with the sentence cache off: the warm-up resends measured
    bodies, which a cache would then answer without the model.
    """
    from serving.torchserve import TorchServe

    bodies = request_bodies(sentences, beams, standin)
    with tempfile.TemporaryDirectory(prefix="zh_en_latency_") as workdir:
        store, archive = archive_with("int8", model_dir, Path(workdir))
        with TorchServe(store, Path(workdir) / "server", models=[archive]) as server:
            loaded = workers_memory(ready_worker_pids(server))
            for body in bodies[:WARMUP]:
                _post(server, body)
            seconds = []
            started = time.perf_counter()
            for body in bodies:
                began = time.perf_counter()
                _post(server, body)
                seconds.append(time.perf_counter() - began)
            total = time.perf_counter() - started
            after = workers_memory(ready_worker_pids(server))
    return {
        **percentiles(seconds),
        "sentences_per_s": round(len(sentences) / total, 2),
        **{
            key: value
            for key, value in loaded.items()
            if key not in ("peak_mb", "workers", "private_mb_total")
        },
        "run_rss_mb": after.get("rss_mb"),
        "peak_rss_mb": after.get("peak_mb"),
        "workers": after.get("workers"),
    }


def _post(server: Any, body: bytes) -> None:
    response = server.client.post_raw(body, "application/json")
    if response.status_code != 200:
        raise RuntimeError(f"HTTP rung: {response.status_code} {response.text[:200]}")


def run_ladder(
    model_dir: Path,
    sentences: list[Sentence],
    beams: int,
    http: bool,
    converted: Path | None,
    processes: BaseContext,
) -> list[dict[str, Any]]:
    """Every rung in order; `http` adds rung 5, `converted` (a CTranslate2 model) rungs 6, 7, 11 and 12."""
    rungs = [
        *LADDER,
        *([HTTP_RUNG] if http else []),
        *(PEER_RUNGS if converted else []),
        *GENERATE_RUNGS,
        OWN_LENGTHS_RUNG,
        *(MAPPED_PEER_RUNGS if converted else []),
        *ONEDNN_RUNGS,
    ]
    rows = [run_rung(rung, model_dir, sentences, beams, converted, processes) for rung in rungs]
    baseline = rows[0]
    for rung, row in zip(rungs, rows, strict=True):
        per_batch = rung.shape == "batch"
        row["speedup_p50"] = None if per_batch else round(baseline["p50_ms"] / row["p50_ms"], 2)
        row["speedup_throughput"] = round(row["sentences_per_s"] / baseline["sentences_per_s"], 2)
    return rows


def run_rung(
    rung: Rung,
    model_dir: Path,
    sentences: list[Sentence],
    beams: int,
    converted: Path | None,
    processes: BaseContext,
) -> dict[str, Any]:
    label = f"beams={beams} rung {rung.number} ({rung.name})"
    say(f"{label}: start, {len(sentences)} sentences")
    began = time.perf_counter()
    if rung.shape == "http":
        figures = measure_http(model_dir, sentences, beams, is_standin(model_dir))
    else:
        figures = _in_subprocess(processes, rung, model_dir, sentences, beams, converted)
    say(
        f"{label}: done in {time.perf_counter() - began:.0f}s, p50 {figures['p50_ms']:.1f} ms, "
        f"{figures['sentences_per_s']} sent/s, RSS {figures.get('rss_mb')} MB"
    )
    return {"rung": rung.number, "name": rung.name, "variant": rung.variant, **figures}


def command() -> BenchCli:
    cli = BenchCli("latency", __doc__, model=DEFAULT_MODEL, results_dir=True)
    cli.parser.add_argument("--sentences", type=int, default=30)
    cli.parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    cli.parser.add_argument("--http", action="store_true", help="add rung 5 through a real TorchServe")
    cli.parser.add_argument(
        "--no-peer",
        action="store_true",
        help="leave out rungs 6-7, 11-12 (CTranslate2 int8, a benchmark peer)",
    )
    cli.parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_SENTENCES} sentences, greedy only (smoke run)"
    )
    return cli


def run(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from bench.common import sample_sentences

    sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), args.sentences)
    standin = is_standin(model_dir)
    peer, converted = prepare_peer(model_dir, args.no_peer)
    load_average = [round(x, 2) for x in os.getloadavg()]
    ladders = {}
    processes = rung_processes(args.quick)
    for beams in args.beams:
        rungs = run_ladder(model_dir, sentences, beams, args.http, converted, processes)
        ladders[str(beams)] = {
            "rungs": rungs,
            "targets": targets(rungs, beams, BATCH),
            "http_overhead_p50_ms": http_overhead_ms(rungs),
            "peer_ratios": peer_ratios(rungs),
        }
    notes = [
        *(NOTES if args.http else NOTES[:-1]),
        *([PEER_NOTE] if converted else []),
        *([QUICK_NOTE] if args.quick else []),
    ]
    return {
        "model": str(model_dir),
        "standin": standin,
        "output_lengths": "reference lengths (stand-in)" if standin else "natural",
        "n": len(sentences),
        "batch": BATCH,
        "threads": 1,
        "load_average_at_start": load_average,
        "peer": peer,
        "notes": notes,
        "ladders": ladders,
    }


def prepare_peer(model_dir: Path, no_peer: bool) -> tuple[dict[str, Any], Path | None]:
    """What the result says about the peer, and its converted model (None: rungs 6-7 left out).

    A missing ctranslate2 leaves the peer out with a message; a failed conversion is an error.
    """
    if no_peer:
        return {"skipped": "--no-peer"}, None
    from bench import ctranslate2_peer

    try:
        ctranslate2_peer.require()
    except ctranslate2_peer.PeerUnavailable as error:
        say(f"rungs 6-7 (CTranslate2 peer) left out: {error}")
        return {"skipped": str(error)}, None
    began = time.perf_counter()
    converted = ctranslate2_peer.cached(model_dir)
    if converted is None:
        # In a spawned process: converting loads the fp32 model, and a child's peak RSS (ru_maxrss)
        # starts from this process's RSS at the fork, so converting here would raise every rung's peak.
        with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
            converted = pool.apply(ctranslate2_peer.convert, (model_dir,))
    say(
        f"CTranslate2 {ctranslate2_peer.version()} int8 model ready in "
        f"{time.perf_counter() - began:.0f}s: {converted}"
    )
    peer = {
        "engine": f"CTranslate2 {ctranslate2_peer.version()}",
        "quantization": ctranslate2_peer.QUANTIZATION,
        "note": ctranslate2_peer.NOTICE,
        "converted": str(converted),
    }
    return peer, converted


def main(argv: list[str] | None = None) -> int:
    cli = command()
    args = cli.parse(argv)
    if args.quick:
        args.sentences, args.beams = QUICK_SENTENCES, [1]
    result = run(args, cli.model_dir())
    path = cli.write("latency", result)
    print(markdown(result))
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
