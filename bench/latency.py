"""The latency ladder: what each step of the playbook buys, measured in one run on the same sentences.

    python -m bench.latency [--model synthetic|hub id|dir] [--sentences 30] [--beams 1 4] [--http]

Rungs (1 intra-op thread each):
  1. fp32, every input padded to a fixed 128 tokens (the naive baseline)
  2. fp32, dynamic shapes (one sentence, never padded)
  3. int8, dynamic shapes
  4. int8, dynamic shapes, batches of 8 padded to their longest (what server-side batching does)
  5. with --http: rung 3 through a real TorchServe (int8 archive), one request at a time
Each in-process rung runs in its own process, so its memory is its own. On the offline stand-in
every output is forced to its reference translation's token length (a batch: each row its own,
the batch runs to its longest), so timings transfer to the real model; a real model decodes
naturally. Writes bench/results/latency.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from bench.common import RESULTS_DIR, Sentence, is_standin, load_model_dir, percentiles, write_result

Shape = Literal["fixed128", "dynamic", "batch8"]
FIXED_LENGTH = 128
BATCH = 8


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    variant: str  # fp32 | int8
    shape: Shape | Literal["http"]


LADDER = (
    Rung(1, "fp32, padded to 128", "fp32", "fixed128"),
    Rung(2, "fp32, dynamic", "fp32", "dynamic"),
    Rung(3, "int8, dynamic", "int8", "dynamic"),
    Rung(4, f"int8, dynamic, batches of {BATCH}", "int8", "batch8"),
)
HTTP_RUNG = Rung(5, "int8, dynamic, through TorchServe", "int8", "http")


def pad_to_fixed(ids: Sequence[Sequence[int]], length: int, pad_id: int) -> tuple[Any, Any]:
    """The naive baseline: every row padded to `length`, whatever its own length."""
    import torch

    input_ids = torch.full((len(ids), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ids), length), dtype=torch.long)
    for row, tokens in enumerate(ids):
        if len(tokens) > length:
            raise ValueError(f"input of {len(tokens)} tokens does not fit the fixed {length}")
        input_ids[row, : len(tokens)] = torch.tensor(tokens)
        attention_mask[row, : len(tokens)] = 1
    return input_ids, attention_mask


def options_for(sentences: Sequence[Sentence], beams: int, standin: bool) -> list[Any]:
    from handlers.request_parsing import GenerationOptions

    if not standin:
        return [GenerationOptions(num_beams=beams) for _ in sentences]
    return [GenerationOptions(beams, s.reference_tokens, s.reference_tokens) for s in sentences]


def measure_in_process(rung: Rung, model_dir: Path, sentences: list[Sentence], beams: int) -> dict[str, Any]:
    """Runs in a fresh process: load, warm up, time every sentence (or batch), report memory."""
    from handlers.handler_config import HandlerConfig
    from handlers.translator import Translator

    translator = Translator.load(model_dir, HandlerConfig(variant=rung.variant, warmup=False))  # type: ignore[arg-type]
    standin = is_standin(model_dir)
    groups = [sentences[i : i + BATCH] for i in range(0, len(sentences), BATCH)]
    if rung.shape != "batch8":
        groups = [[sentence] for sentence in sentences]
    for group in groups[:2]:  # warm-up
        _run_group(translator, rung, group, beams, standin)
    seconds = []
    started = time.perf_counter()
    for group in groups:
        began = time.perf_counter()
        _run_group(translator, rung, group, beams, standin)
        seconds.append(time.perf_counter() - began)
    total = time.perf_counter() - started
    gc.collect()
    return {
        **percentiles(seconds),
        "sentences_per_s": round(len(sentences) / total, 2),
        **memory_mb(),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def memory_mb(pid: int | None = None) -> dict[str, int]:
    """Resident memory in steady state, split: private (anonymous) and file-backed.

    File-backed pages are the mmapped safetensors weights: shared by the workers of one model and
    reclaimable, so the private part is what each extra worker really costs.
    """
    status = Path(f"/proc/{pid or 'self'}/status")
    if not status.exists():
        return {"rss_mb": round(psutil.Process(pid).memory_info().rss / 2**20)}
    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    kib = {key: int(fields[key].split()[0]) for key in ("VmRSS", "RssAnon", "RssFile")}
    return {
        "rss_mb": kib["VmRSS"] // 1024,
        "private_mb": kib["RssAnon"] // 1024,
        "file_mb": kib["RssFile"] // 1024,
    }


def _run_group(translator: Any, rung: Rung, group: list[Sentence], beams: int, standin: bool) -> None:
    import torch

    options = options_for(group, beams, standin)
    ids = translator.encode([s.source for s in group])
    if rung.shape != "fixed128":
        translator.generate(ids, options)
        return
    input_ids, attention_mask = pad_to_fixed(ids, FIXED_LENGTH, translator.tokenizer.pad_token_id)
    kwargs = {"num_beams": beams}
    if standin:
        kwargs |= {"min_new_tokens": options[0].min_new_tokens, "max_new_tokens": options[0].max_new_tokens}
    with torch.inference_mode():
        translator.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def _in_subprocess(rung: Rung, model_dir: Path, sentences: list[Sentence], beams: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        result: dict[str, Any] = pool.apply(measure_in_process, (rung, model_dir, sentences, beams))
    return result


def measure_http(model_store: Path, sentences: list[Sentence], beams: int, standin: bool) -> dict[str, Any]:
    """One request at a time through a real server started from the production config."""
    import json

    from serving.server import TorchServe

    with (
        tempfile.TemporaryDirectory(prefix="zh_en_latency_") as workdir,
        TorchServe(model_store, Path(workdir)) as server,
    ):
        bodies = []
        for sentence, option in zip(sentences, options_for(sentences, beams, standin), strict=True):
            fields = {k: v for k, v in asdict(option).items() if v is not None}
            bodies.append(json.dumps({"text": sentence.source, **fields}).encode())
        for body in bodies[:2]:
            server.client.post_raw(body, "application/json")
        seconds = []
        started = time.perf_counter()
        for body in bodies:
            began = time.perf_counter()
            response = server.client.post_raw(body, "application/json")
            seconds.append(time.perf_counter() - began)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP rung: {response.status_code} {response.text[:200]}")
        total = time.perf_counter() - started
        workers = [memory_mb(pid) for pid in server.worker_pids()]
    per_worker = (
        {key: round(statistics.fmean(w[key] for w in workers)) for key in workers[0]} if workers else {}
    )
    return {
        **percentiles(seconds),
        "sentences_per_s": round(len(sentences) / total, 2),
        **per_worker,
        "peak_rss_mb": None,
    }


def run_ladder(
    model_dir: Path, sentences: list[Sentence], beams: int, model_store: Path | None
) -> list[dict[str, Any]]:
    rows = []
    rungs = [*LADDER, HTTP_RUNG] if model_store else list(LADDER)
    for rung in rungs:
        print(f"  beams={beams} rung {rung.number}: {rung.name} ...", file=sys.stderr, flush=True)
        if rung.shape == "http":
            assert model_store is not None
            figures = measure_http(model_store, sentences, beams, is_standin(model_dir))
        else:
            figures = _in_subprocess(rung, model_dir, sentences, beams)
        rows.append({"rung": rung.number, "name": rung.name, "variant": rung.variant, **figures})
        print(f"    p50 {figures['p50_ms']:.1f} ms, {figures['sentences_per_s']} sent/s", file=sys.stderr)
    baseline = rows[0]
    for row in rows:
        row["speedup_p50"] = round(baseline["p50_ms"] / row["p50_ms"], 2) if row["rung"] != 4 else None
        row["speedup_throughput"] = round(row["sentences_per_s"] / baseline["sentences_per_s"], 2)
    return rows


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, computed from one ladder: met or missed, and by how much."""
    by = {row["rung"]: row for row in rows}
    checks = [
        ("int8 dynamic p50 <= 1/3 of fp32 dynamic p50", by[3]["p50_ms"] / by[2]["p50_ms"], 1 / 3, "ratio"),
        ("rung 3 >= 4x faster than rung 1 (p50)", by[1]["p50_ms"] / by[3]["p50_ms"], 4.0, "min"),
        ("int8 RSS <= 60% of fp32 (steady state)", by[3]["rss_mb"] / by[2]["rss_mb"], 0.60, "ratio"),
    ]
    if 5 in by:
        checks.append(("HTTP serving overhead p50 <= 5 ms", by[5]["p50_ms"] - by[3]["p50_ms"], 5.0, "ratio"))
    return [
        {
            "target": name,
            "measured": round(value, 3),
            "limit": round(limit, 3),
            "met": _met(value, limit, kind),
        }
        for name, value, limit, kind in checks
    ]


def _met(value: float, limit: float, kind: str) -> bool:
    return value >= limit if kind == "min" else value <= limit


def markdown(result: dict[str, Any]) -> str:
    lines = []
    for beams, ladder in result["ladders"].items():
        lines += [
            f"\n**{'greedy' if beams == '1' else f'beam {beams}'}** ({result['n']} sentences, 1 thread)\n",
            "| rung | p50 ms | p95 ms | p99 ms | sent/s | RSS MB (private + file) | peak RSS MB "
            "| speedup p50 | speedup sent/s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in ladder["rungs"]:
            lines.append(
                f"| {row['rung']}. {row['name']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} "
                f"| {row['p99_ms']:.1f} "
                f"| {row['sentences_per_s']} | {_memory(row)} | {row['peak_rss_mb'] or '-'} "
                f"| {row['speedup_p50'] or '-'} | {row['speedup_throughput']} |"
            )
        lines += ["", "| target | measured | limit | met |", "|---|---|---|---|"]
        lines += [
            f"| {t['target']} | {t['measured']} | {t['limit']} | {'yes' if t['met'] else 'NO'} |"
            for t in ladder["targets"]
        ]
    return "\n".join(lines)


def _memory(row: dict[str, Any]) -> str:
    if "private_mb" not in row:
        return str(row.get("rss_mb", "-"))
    return f"{row['rss_mb']} ({row['private_mb']} + {row['file_mb']})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="Helsinki-NLP/opus-mt-zh-en")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--http", action="store_true", help="add rung 5 through a real TorchServe")
    parser.add_argument("--model-store", type=Path, default=Path("model_store"))
    parser.add_argument("--quick", action="store_true", help="4 sentences, greedy only (smoke run)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.beams = 8, [1]
    from transformers import AutoTokenizer

    from bench.common import sample_sentences

    model_dir = load_model_dir(args.model) if not Path(args.model).is_dir() else Path(args.model)
    sentences = sample_sentences(AutoTokenizer.from_pretrained(model_dir), args.sentences)
    store = args.model_store if args.http else None
    ladders = {}
    for beams in args.beams:
        rungs = run_ladder(model_dir, sentences, beams, store)
        ladders[str(beams)] = {"rungs": rungs, "targets": targets(rungs)}
    result = {
        "model": str(model_dir),
        "standin": is_standin(model_dir),
        "output_lengths": "reference lengths (stand-in)" if is_standin(model_dir) else "natural",
        "n": len(sentences),
        "ladders": ladders,
    }
    path = write_result("latency", result, args.results_dir)
    print(markdown(result))
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
