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
import gc
import json
import multiprocessing
import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Literal

from bench.cli import BenchCli, Progress
from bench.common import DEFAULT_MODEL, Sentence, archive_with, is_standin, percentiles
from bench.ladder_targets import http_overhead_ms, markdown, peer_ratios, targets
from bench.process_memory import memory_mb, ready_worker_pids, workers_memory
from handlers.handler_config import DecoderName, HandlerConfig, Int8Kernels, Variant
from handlers.scheduling.policy import DecodePolicy

Shape = Literal["fixed128", "dynamic", "batch", "http"]
Engine = Literal["torch", "ctranslate2"]
FIXED_LENGTH = 128
BATCH = 16
WARMUP = 2
QUICK_SENTENCES = 16  # one full batch for rungs 4 and 7
QUICK_NOTE = "--quick: rungs forked from one process that imported the bench, so RSS is not each rung's own."
say = Progress("latency")


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    variant: Variant
    shape: Shape
    engine: Engine = "torch"
    decoder: DecoderName = "fast"
    # CTranslate2 only: restrict its output to the target side (use_vmap), as our output layer is.
    vmap: bool = False
    # On the stand-in a batch is forced to its longest reference (equal work for every engine, as
    # CTranslate2 takes one length per batch); False: each sentence to its own, as eos would end it.
    shared_lengths: bool = True
    # Ours only: the int8 matmul kernels (handlers.model.quantization.int8_kernels).
    int8_kernels: Int8Kernels = "fbgemm"


LADDER = (
    Rung(1, "fp32, padded to 128", "fp32", "fixed128"),
    Rung(2, "fp32, dynamic", "fp32", "dynamic"),
    Rung(3, "int8, dynamic", "int8", "dynamic"),
    Rung(4, f"int8, dynamic, batches of {BATCH}", "int8", "batch"),
)
OWN_LENGTHS_RUNG = Rung(
    10, f"int8, dynamic, batches of {BATCH}, own lengths", "int8", "batch", shared_lengths=False
)
GENERATE_RUNGS = (
    Rung(8, "int8, dynamic, generate()", "int8", "dynamic", decoder="generate"),
    Rung(9, f"int8, dynamic, batches of {BATCH}, generate()", "int8", "batch", decoder="generate"),
)
HTTP_RUNG = Rung(5, "int8, dynamic, through TorchServe", "int8", "http")
PEER_RUNGS = (
    Rung(6, "CTranslate2 int8, one sentence (peer)", "int8", "dynamic", "ctranslate2"),
    Rung(7, f"CTranslate2 int8, batches of {BATCH} (peer)", "int8", "batch", "ctranslate2"),
)
MAPPED_PEER_RUNGS = (
    Rung(11, "CTranslate2 int8 + map, one sentence (peer)", "int8", "dynamic", "ctranslate2", vmap=True),
    Rung(12, f"CTranslate2 int8 + map, batches of {BATCH} (peer)", "int8", "batch", "ctranslate2", vmap=True),
)
# The opt-in oneDNN kernels (AMX int8 where the CPU has it), beside rungs 3 and 4.
ONEDNN_RUNGS = (
    Rung(13, "int8, dynamic, oneDNN kernels", "int8", "dynamic", int8_kernels="onednn"),
    Rung(14, f"int8, dynamic, batches of {BATCH}, oneDNN kernels", "int8", "batch", int8_kernels="onednn"),
)

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


def pad_to_fixed(ids: Sequence[Sequence[int]], length: int, pad_id: int) -> tuple[Any, Any]:
    """The naive baseline: every row padded to `length`, whatever its own length."""
    import torch

    input_ids = torch.full((len(ids), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ids), length), dtype=torch.long)
    for row, tokens in enumerate(ids):
        if len(tokens) > length:
            raise ValueError(f"input of {len(tokens)} tokens does not fit the fixed {length}")
        input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention_mask[row, : len(tokens)] = 1
    return input_ids, attention_mask


def options_for(sentences: Sequence[Sentence], beams: int, standin: bool, shared: bool = False) -> list[Any]:
    """Per-sentence options; a stand-in is forced to reference lengths (`shared`: all to the longest)."""
    from handlers.model.options import GenerationOptions

    if not standin:
        return [GenerationOptions(num_beams=beams) for _ in sentences]
    lengths = [s.reference_tokens for s in sentences]
    if shared:
        lengths = [max(lengths)] * len(lengths)
    return [GenerationOptions(beams, n, n) for n in lengths]


def groups_of(rung: Rung, sentences: list[Sentence]) -> list[list[Sentence]]:
    if rung.shape == "batch":
        return [sentences[i : i + BATCH] for i in range(0, len(sentences), BATCH)]
    return [[sentence] for sentence in sentences]


def measure_in_process(
    rung: Rung, model_dir: Path, sentences: list[Sentence], beams: int, converted: Path | None = None
) -> dict[str, Any]:
    """Runs in a fresh process: load, gc, memory, warm up, time every sentence (or batch), memory again.

    `converted`: the CTranslate2 model directory, for the peer rungs (bench.ctranslate2_peer.convert).
    """
    standin = is_standin(model_dir)
    harness = memory_mb()["rss_mb"]  # Python, torch and transformers, before the engine loads
    run_group, engine = _load_engine(rung, model_dir, beams, standin, converted)
    gc.collect()
    loaded = memory_mb()
    groups = groups_of(rung, sentences)
    for group in groups[:WARMUP]:
        run_group(group)
    seconds = []
    started = time.perf_counter()
    for group in groups:
        began = time.perf_counter()
        run_group(group)
        seconds.append(time.perf_counter() - began)
    total = time.perf_counter() - started
    return {
        **engine,
        **percentiles(seconds),
        "sentences_per_s": round(len(sentences) / total, 2),
        **loaded,
        "harness_rss_mb": harness,
        **{f"run_{key}": value for key, value in memory_mb().items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _load_engine(
    rung: Rung, model_dir: Path, beams: int, standin: bool, converted: Path | None
) -> tuple[Callable[[list[Sentence]], None], dict[str, str]]:
    """The rung's engine, loaded: a function that translates one group, and what the row says about it."""
    if rung.engine == "ctranslate2":
        from bench import ctranslate2_peer

        if converted is None:
            raise ValueError(f"rung {rung.number} needs the model converted by ctranslate2_peer.convert")
        peer = ctranslate2_peer.PeerTranslator(model_dir, converted, use_vmap=rung.vmap)
        label = {"engine": f"CTranslate2 {ctranslate2_peer.version()}", "note": ctranslate2_peer.NOTICE}
        if rung.vmap:
            label["vocabulary_map"] = "target side (every target.spm piece)"
        return (lambda group: _run_peer_group(peer, group, beams, standin)), label
    from handlers.model.translator import Translator

    config = HandlerConfig(
        variant=rung.variant, threads=1, warmup=False, decoder=rung.decoder, int8_kernels=rung.int8_kernels
    )
    translator = Translator.load(model_dir, config.model)
    label = {"engine": "torch", "decoder": rung.decoder}
    if rung.decoder == "fast":
        label["target_vocabulary"] = str(translator.decoder.output.size)  # type: ignore[attr-defined]
    return (lambda group: _run_group(translator, rung, group, beams, standin)), label


def _run_group(translator: Any, rung: Rung, group: list[Sentence], beams: int, standin: bool) -> None:
    from handlers.scheduling.run import translate_ids  # the served loop, run to its end here

    options = options_for(group, beams, standin, shared=rung.shape == "batch" and rung.shared_lengths)
    ids = translator.encode([s.source for s in group])
    if rung.shape == "fixed128":
        _generate_fixed(translator, ids, options[0])
    else:
        translate_ids(translator, ids, options)


def _run_peer_group(peer: Any, group: list[Sentence], beams: int, standin: bool) -> None:
    """One CTranslate2 call for the group, forced like ours: a batch to its longest reference."""
    from bench.ctranslate2_peer import decoding_lengths

    lengths = decoding_lengths([s.reference_tokens for s in group], standin)
    peer.translate([s.source for s in group], beams, lengths)


def _generate_fixed(translator: Any, ids: list[list[int]], option: Any) -> None:
    """Rung 1: one sentence padded to 128, with the same generate() arguments as Translator.generate."""
    import torch

    input_ids, attention_mask = pad_to_fixed(ids, FIXED_LENGTH, translator.tokenizer.pad_token_id)
    policy = DecodePolicy.of(HandlerConfig(), translator)  # the shipped rules, as the ladder's config
    kwargs = {"max_new_tokens": policy.new_token_cap(option, len(ids[0]))}
    if (num_beams := policy.beams_for(option)) is not None:
        kwargs["num_beams"] = num_beams
    if option.min_new_tokens is not None:
        kwargs["min_new_tokens"] = option.min_new_tokens
    with torch.inference_mode():
        output = translator.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    translator.tokenizer.batch_decode(output, skip_special_tokens=True)


def rung_processes(quick: bool) -> BaseContext:
    """How each in-process rung gets its process: spawned (its memory its own), or under --quick forked
    from one server that imported the bench once (a spawned rung spends about 7 s importing it)."""
    if not quick:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["bench.latency"])
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
