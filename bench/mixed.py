"""The two admission policies of the one decode path, one host, one run: paced interactive users
beside documents, uniform load, an idle server.

    python -m bench.mixed [--model synthetic] [--users 20] [--pace 2] [--document-users 4]
                          [--document-sentences 60] [--duration 60s] [--uniform-users 100]
                          [--uniform-duration 30s] [--beams 1 4] [--stream-sentences 200]

Each policy serves the int8 archive (sentence cache off) from a real TorchServe on loopback
ports (bench.common.SCHEDULERS): `step` as shipped (config/zh_en_int8.yaml: one
continuous-batching worker, two partition processes x 1 thread, requests admitted at any decoder
step); `static`, the same decoder and scheduler admitting requests only at TorchServe's batch
boundaries (two workers x 1 thread, batches of 16 decoded to their end). Phases, each bounded,
all against 127.0.0.1:

1. interactive: --users single-sentence users, each sending one request every --pace seconds
   (about a third of the host's capacity), at the model's beams;
2. mixed: the same users beside --document-users users sending --document-sentences-sentence
   paragraphs back to back;
3. uniform: --uniform-users single-sentence users at saturation, at each of --beams;
4. idle: one sentence's latency (median of 5), then a --stream-sentences document: the time to
   its first streamed line (step) or to the whole answer (static cannot stream).

Serving overhead: the idle one-sentence latency minus the same 5 sentences translated in this
process (Translator.translate, int8, 1 thread, median of 3 passes), measured once in the run.

On the stand-in every output is forced to its reference length (bench.load). Progress goes to
stderr. Writes mixed.json, mixed.md and mixed.png into the run's folder; the targets are issue 26's.
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
from bench.common import SCHEDULERS, archive_with, is_standin, sample_sentences, writable
from bench.load import LoadSpec, run_load
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.scheduling.run import load_and_warm_up, translate
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

        def load(
            label: str,
            users: int,
            documents: int = 0,
            beams: int | None = None,
            *,
            duration: str,
            pace: float = 0,
        ) -> dict[str, Any]:
            spec = LoadSpec(
                server.client.endpoints.inference,
                users=users + documents,
                spawn_rate=users + documents,
                duration=duration,
                num_beams=beams,
                key_file=server.key_file,
                label=f"mixed-{name}-{label}",
                document_users=documents,
                document_sentences=args.document_sentences,
                pace_seconds=pace,
            )
            with contextlib.redirect_stdout(sys.stderr):
                summary = run_load(spec, workdir / "locust", model_dir)
            return summary

        alone = load("interactive", args.users, documents=0, duration=args.duration, pace=args.pace)
        figures["interactive"] = {key: alone[key] for key in LOAD_KEYS}
        mixed = load("mixed", args.users, args.document_users, duration=args.duration, pace=args.pace)
        by_name = mixed["by_name"]
        figures["mixed"] = {label: {key: row[key] for key in LOAD_KEYS} for label, row in by_name.items()}
        for beams in args.beams:
            uniform = load(
                f"uniform-beam{beams}", args.uniform_users, beams=beams, duration=args.uniform_duration
            )
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
    translator = load_and_warm_up(model_dir, HandlerConfig(variant="int8", threads=1))
    times = []
    for _ in range(3):
        for body in singles:
            options = GenerationOptions(
                min_new_tokens=body.get("min_new_tokens"), max_new_tokens=body.get("max_new_tokens")
            )
            started = time.monotonic()
            translate(translator, [body["text"]], options)
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
    """Issue 26's targets, each as the measured ratio and whether it holds."""
    step, static = result["schedulers"]["step"], result["schedulers"]["static"]
    out: dict[str, Any] = {}
    for name, figures in (("static", static), ("step", step)):
        single = next(label for label in figures["mixed"] if label != "document")
        mixed, alone = figures["mixed"][single], figures["interactive"]
        document = figures["mixed"].get("document", {"requests": 0, "rps": 0.0, "failures": 0})
        out[name] = {
            "p95_mixed_over_alone": round(mixed["p95_ms"] / alone["p95_ms"], 2),
            "p50_mixed_over_alone": round(mixed["p50_ms"] / alone["p50_ms"], 2),
            "interactive_rps_mixed_over_alone": round(mixed["rps"] / alone["rps"], 2),
            "documents_done": document["requests"] - document["failures"],
            "document_failures": document["failures"],
            "serving_overhead_ms": round(
                figures["idle"]["one_sentence_p50_ms"] - result["in_process_one_sentence_ms"], 1
            ),
        }
    out["step_targets"] = {
        "paced_p95_beside_documents_at_most_1.5x_alone": out["step"]["p95_mixed_over_alone"] <= 1.5,
        "interactive_rps_held": out["step"]["interactive_rps_mixed_over_alone"] >= 0.95,
        "documents_complete_without_failures": out["step"]["document_failures"] == 0
        and out["step"]["documents_done"] > 0,
        "serving_overhead_at_most_10ms": out["step"]["serving_overhead_ms"] <= 10,
    }
    for count in beams:
        key = f"uniform_beam{count}"
        ratio = step[key]["rps"] / static[key]["rps"]
        out[f"uniform_beam{count}_step_over_static"] = round(ratio, 2)
        out["step_targets"][f"uniform_beam{count}_at_least_1.0x_static_no_failures"] = (
            ratio >= 1.0 and step[key]["failures"] == 0
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
        "# Admission at any step against admission at batch boundaries (bench.mixed)",
        "",
        f"{result['date']}, {m['cpu']} ({m['cores']} cores), commit {result['signature']['commit']}. "
        f"Command: `{result['signature']['command']}`."
        + (
            " Offline stand-in (random weights), outputs forced to reference lengths."
            if result["standin"]
            else ""
        ),
        "",
        "| scheduler | paced alone req/s | alone p50 ms | alone p95 ms | beside documents req/s | p50 ms "
        f"| p95 ms | documents req/s | {uniform} | idle one sentence ms "
        "| idle document first sentence ms | serving overhead ms |",
        "|" + "---|" * (11 + len(result["beams"])),
        *rows,
        "",
        f"Serving overhead: the idle one-sentence p50 minus {result['in_process_one_sentence_ms']:.0f} ms "
        "for the same sentences translated in process (int8, 1 thread).",
        "",
        f"Interactive users: {result['users']}, one request every {result['pace']} s each; beside "
        f"them {result['document_users']} users send {result['document_sentences']}-sentence "
        "documents back to back.",
        "",
        "Targets (issue 26, step):",
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
    axis.set_title("Paced interactive p95, alone and beside users sending documents")
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
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--pace", type=float, default=2.0, help="seconds between one user's requests")
    parser.add_argument("--document-users", type=int, default=4)
    parser.add_argument("--document-sentences", type=int, default=60)
    parser.add_argument("--duration", default="60s", help="each paced phase")
    parser.add_argument("--uniform-users", type=int, default=100)
    parser.add_argument("--uniform-duration", default="30s")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--stream-sentences", type=int, default=200)
    parser.add_argument("--schedulers", nargs="+", default=list(SCHEDULERS), choices=list(SCHEDULERS))
    args = cli.parse(argv)
    model_dir = cli.model_dir()
    result: dict[str, Any] = {
        "beams": args.beams,
        "users": args.users,
        "pace": args.pace,
        "document_users": args.document_users,
        "document_sentences": args.document_sentences,
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
        report(saved, writable(args.results_dir / "mixed.md"))
        plot(saved, writable(args.results_dir / "mixed.png"))
    print(json.dumps(saved.get("targets", saved["schedulers"]), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
