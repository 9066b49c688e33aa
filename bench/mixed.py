"""Static batching against step scheduling, one host, one run: mixed traffic, uniform load, streaming.

    python -m bench.mixed [--model synthetic] [--users 40] [--document-users 4] [--duration 30s]
                          [--uniform-users 100] [--beams 1 4] [--stream-sentences 200]

Each scheduler serves the int8 archive (sentence cache off) from a real TorchServe on loopback
ports (bench.common SCHEDULERS): `static` as it shipped before commit 903314a (2 workers x 1
thread, batches of 16 decoded to their end); `step` as it ships now, with continuousBatching and
one worker (TorchServe 0.12 cannot run continuous batching with two workers: docs/SCHEDULING.md)
holding two running batches on two processes of one intra-op thread each, sentences joining and
leaving them every decoder step.
Phases, each bounded, all against 127.0.0.1:

1. interactive: --users single-sentence users, no pause (saturation), at the model's beams;
2. mixed: the same users plus --document-users users sending 40-sentence paragraphs;
3. uniform: --uniform-users single-sentence users at each of --beams;
4. idle: one sentence's latency (median of 5), then a --stream-sentences document: the time to
   its first streamed line (step) or to the whole answer (static cannot stream).

Serving overhead: the idle one-sentence latency minus the same 5 sentences translated in this
process (Translator.translate, int8, 1 thread, median of 3 passes), measured once in the run.

On the stand-in every output is forced to its reference length (bench.load). Progress goes to
stderr. Writes bench/results/mixed.json, mixed.md and mixed.png; the targets are issue 14's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from bench.cli import BenchCli, Progress
from bench.common import SCHEDULERS, archive_with, is_standin, sample_sentences
from bench.load import LoadSpec, run_load
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.translator import Translator
from serving.torchserve import TorchServe

LOAD_KEYS = ("requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms")
say = Progress("mixed")


def measure(
    name: str,
    args: argparse.Namespace,
    model_dir: Path,
    workdir: Path,
    bodies: tuple[list[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """One scheduler's phases; `bodies`: the idle phase's singles and document (idle_bodies)."""
    handler, top = SCHEDULERS[name]
    store, mar = archive_with("int8", model_dir, workdir / name, handler, top)
    figures: dict[str, Any] = {}
    with TorchServe(store, workdir / name / "server", models=[mar]) as server:
        say(f"{name}: serving {mar}")

        def load(label: str, users: int, documents: int = 0, beams: int | None = None) -> dict[str, Any]:
            spec = LoadSpec(
                server.client.endpoints.inference,
                users=users + documents,
                spawn_rate=users + documents,
                duration=args.duration,
                num_beams=beams,
                key_file=server.key_file,
                label=f"mixed-{name}-{label}",
                document_users=documents,
            )
            with contextlib.redirect_stdout(sys.stderr):
                summary = run_load(spec, workdir / "locust", model_dir)
            return summary

        alone = load("interactive", args.users, documents=0)
        figures["interactive"] = {key: alone[key] for key in LOAD_KEYS}
        mixed = load("mixed", args.users, documents=args.document_users)
        by_name = mixed["by_name"]
        figures["mixed"] = {label: {key: row[key] for key in LOAD_KEYS} for label, row in by_name.items()}
        for beams in args.beams:
            uniform = load(f"uniform-beam{beams}", args.uniform_users, beams=beams)
            figures[f"uniform_beam{beams}"] = {key: uniform[key] for key in LOAD_KEYS}
        figures["idle"] = idle(server, name, *bodies)
        figures["standin"] = alone["standin"]
    return figures


def idle_bodies(model_dir: Path, sentences: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Five one-sentence bodies and a `sentences`-sentence document, at reference lengths on a stand-in."""
    from transformers import AutoTokenizer

    picked = sample_sentences(AutoTokenizer.from_pretrained(model_dir), sentences + 5)
    forced = is_standin(model_dir)

    def body(chosen: list[Any]) -> dict[str, Any]:
        text = "".join(s.source for s in chosen)
        tokens = round(statistics.fmean(s.reference_tokens for s in chosen))
        return {"text": text, **({"min_new_tokens": tokens, "max_new_tokens": tokens} if forced else {})}

    return [body([sentence]) for sentence in picked[:5]], body(picked[5:])


def in_process_ms(model_dir: Path, singles: list[dict[str, Any]]) -> float:
    """The median time to translate each one-sentence body in this process, as one worker would."""
    translator = Translator.load(model_dir, HandlerConfig(variant="int8", threads=1))
    times = []
    for _ in range(3):
        for body in singles:
            options = GenerationOptions(
                min_new_tokens=body.get("min_new_tokens"), max_new_tokens=body.get("max_new_tokens")
            )
            started = time.monotonic()
            translator.translate([body["text"]], options)
            times.append((time.monotonic() - started) * 1000)
    return round(statistics.median(times), 1)


def idle(
    server: TorchServe, name: str, singles: list[dict[str, Any]], document: dict[str, Any]
) -> dict[str, float]:
    """On an idle server: one sentence's latency, then how soon a long document's first sentence arrives."""
    url = f"{server.client.endpoints.inference}/predictions/zh_en"
    headers = server.client._headers("inference", {"Content-Type": "application/json"})
    times = []
    for single in singles:
        started = time.monotonic()
        response = requests.post(url, data=json.dumps(single), headers=headers, timeout=120)
        times.append((time.monotonic() - started) * 1000)
        response.raise_for_status()
    document = {**document, **({"stream": True} if name == "step" else {})}
    started = time.monotonic()
    with requests.post(url, data=json.dumps(document), headers=headers, stream=True, timeout=600) as response:
        response.raise_for_status()
        lines = response.iter_lines()
        next(lines)
        first = (time.monotonic() - started) * 1000
        count = 1 + sum(1 for line in lines if line) if name == "step" else 1  # static: one body
    whole = (time.monotonic() - started) * 1000
    say(f"{name}: one sentence {statistics.median(times):.0f} ms; document first line {first:.0f} ms")
    return {
        "one_sentence_p50_ms": round(statistics.median(times), 1),
        "document_first_ms": round(first, 1),
        "document_whole_ms": round(whole, 1),
        "document_lines": count,
    }


def targets(result: dict[str, Any], beams: list[int]) -> dict[str, Any]:
    """Issue 14's targets, each as the measured ratio and whether it holds."""
    step, static = result["schedulers"]["step"], result["schedulers"]["static"]
    out: dict[str, Any] = {}
    for name, figures in (("static", static), ("step", step)):
        single = next(label for label in figures["mixed"] if label != "document")
        mixed, alone = figures["mixed"][single], figures["interactive"]
        document = figures["mixed"].get("document", {"rps": 0.0, "failures": 0})
        doc_sentences = document["rps"] * 40
        out[name] = {
            "p95_mixed_over_alone": round(mixed["p95_ms"] / alone["p95_ms"], 2),
            "p50_mixed_over_alone": round(mixed["p50_ms"] / alone["p50_ms"], 2),
            "document_failures": document["failures"],
            "document_sentence_share": round(doc_sentences / (doc_sentences + mixed["rps"]), 2),
            "serving_overhead_ms": round(
                figures["idle"]["one_sentence_p50_ms"] - result["in_process_one_sentence_ms"], 1
            ),
        }
    out["step_targets"] = {
        "p95_at_most_1.5x_alone": out["step"]["p95_mixed_over_alone"] <= 1.5,
        "p50_at_most_1.3x_alone": out["step"]["p50_mixed_over_alone"] <= 1.3,
        "documents_no_failures_and_a_third": out["step"]["document_failures"] == 0
        and out["step"]["document_sentence_share"] >= 1 / 3,
        "first_streamed_sentence_within_2x_one_sentence": step["idle"]["document_first_ms"]
        <= 2 * step["idle"]["one_sentence_p50_ms"],
        "serving_overhead_at_most_5ms": out["step"]["serving_overhead_ms"] <= 5,
    }
    for count in beams:
        key = f"uniform_beam{count}"
        ratio = step[key]["rps"] / static[key]["rps"]
        spread = step[key]["p95_ms"] / step[key]["p50_ms"]
        out[f"uniform_beam{count}_step_over_static"] = round(ratio, 2)
        out["step_targets"][f"uniform_beam{count}_1.15x_static_p95_1.5x_p50_no_failures"] = (
            ratio >= 1.15 and spread <= 1.5 and step[key]["failures"] == 0
        )
    return out


def report(result: dict[str, Any], path: Path) -> None:
    m, rows = result["machine"], []
    for name, figures in result["schedulers"].items():
        single = next(label for label in figures["mixed"] if label != "document")
        document, idle = figures["mixed"].get("document", {}), figures["idle"]
        rows.append(
            f"| {name} | {figures['interactive']['rps']} | {figures['interactive']['p50_ms']:.0f} | "
            f"{figures['interactive']['p95_ms']:.0f} | {figures['mixed'][single]['rps']} | "
            f"{figures['mixed'][single]['p50_ms']:.0f} | {figures['mixed'][single]['p95_ms']:.0f} | "
            f"{document.get('rps', 0)} ({document.get('failures', 0)} failed) | "
            + " | ".join(
                f"{figures[f'uniform_beam{b}']['rps']} (p95/p50 "
                f"{figures[f'uniform_beam{b}']['p95_ms'] / figures[f'uniform_beam{b}']['p50_ms']:.2f})"
                for b in result["beams"]
            )
            + f" | {idle['one_sentence_p50_ms']:.0f} | {idle['document_first_ms']:.0f} | "
            f"{idle['one_sentence_p50_ms'] - result['in_process_one_sentence_ms']:.0f} |"
        )
    uniform = " | ".join(f"uniform beam {b} req/s" for b in result["beams"])
    lines = [
        "# Static batching against step scheduling (bench.mixed)",
        "",
        f"{result['date']}, {m['cpu']} ({m['cores']} cores), commit {result['signature']['commit']}. "
        f"Command: `{result['signature']['command']}`."
        + (
            " Offline stand-in (random weights), outputs forced to reference lengths."
            if result["standin"]
            else ""
        ),
        "",
        "| scheduler | alone req/s | alone p50 ms | alone p95 ms | mixed req/s | mixed p50 ms "
        f"| mixed p95 ms | documents req/s | {uniform} | idle one sentence ms "
        "| idle document first sentence ms | serving overhead ms |",
        "|" + "---|" * (11 + len(result["beams"])),
        *rows,
        "",
        f"Serving overhead: the idle one-sentence p50 minus {result['in_process_one_sentence_ms']:.0f} ms "
        "for the same sentences translated in process (int8, 1 thread).",
        "",
        "Targets (issue 14, step):",
        "",
        *[
            f"- {name}: {'met' if held else 'missed'}"
            for name, held in result["targets"]["step_targets"].items()
        ],
        "",
        "```json",
        json.dumps({k: v for k, v in result["targets"].items() if k != "step_targets"}, indent=2),
        "```",
    ]
    path.write_text("\n".join(lines) + "\n")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["schedulers"])
    figure, axis = plt.subplots(figsize=(7, 3.2))
    width = 0.35
    for offset, phase in ((-width / 2, "interactive"), (width / 2, "mixed")):
        values = []
        for name in names:
            figures = result["schedulers"][name]
            row = (
                figures[phase]
                if phase == "interactive"
                else next(v for k, v in figures["mixed"].items() if k != "document")
            )
            values.append(row["p95_ms"] / 1000)
        bars = axis.bar([i + offset for i in range(len(names))], values, width, label=f"{phase} users p95")
        axis.bar_label(bars, fmt="%.1f s", fontsize=8)
    axis.set_xticks(range(len(names)), [f"scheduler: {name}" for name in names])
    axis.set_ylabel("single-sentence p95 (s)")
    axis.set_title("Interactive p95, alone and with 10% of users sending documents")
    axis.legend(fontsize=8)
    m = result["machine"]
    footer = f"{m['cpu']}, {m['cores']} cores, {result['date']}, commit {result['signature']['commit']}"
    if result["standin"]:
        footer += ", offline stand-in"
    figure.text(0.5, 0.005, footer, ha="center", fontsize=7, color="#555555")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("mixed", __doc__, model="synthetic", results_dir=True)
    parser = cli.parser
    parser.add_argument("--users", type=int, default=40)
    parser.add_argument("--document-users", type=int, default=4)
    parser.add_argument("--uniform-users", type=int, default=100)
    parser.add_argument("--duration", default="30s")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--stream-sentences", type=int, default=200)
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS), choices=list(SCHEDULERS))
    args = cli.parse(argv)
    model_dir = cli.model_dir()
    result: dict[str, Any] = {
        "beams": args.beams,
        "standin": is_standin(model_dir),
        "schedulers": {},
    }
    bodies = idle_bodies(model_dir, args.stream_sentences)
    result["in_process_one_sentence_ms"] = in_process_ms(model_dir, bodies[0])
    say(f"in process: one sentence {result['in_process_one_sentence_ms']:.0f} ms")
    with tempfile.TemporaryDirectory(prefix="zh_en_mixed_") as tmp:
        for name in args.schedulers:
            result["schedulers"][name] = measure(name, args, model_dir, Path(tmp), bodies)
    if set(result["schedulers"]) == set(SCHEDULERS):
        result["targets"] = targets(result, args.beams)
    path = cli.write("mixed", result)
    saved = json.loads(path.read_text())
    if "targets" in saved:
        report(saved, args.results_dir / "mixed.md")
        plot(saved, args.results_dir / "mixed.png")
    print(json.dumps(saved.get("targets", saved["schedulers"]), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
