"""Load test with Locust against a running zh_en server on this machine.

    python -m bench.load --host http://127.0.0.1:8080 --users 100 --spawn-rate 100 --duration 60s \
        --num-beams 1 [--version 1.0-int8] [--key-file key_file.json] [--max-requests N]

Headless Locust in a subprocess (one lean process: FastHttpUser, no wait between requests),
CSV files kept next to the JSON summary in bench/results/. One probe request first tells whether
the server runs the stand-in: then every request carries its sentence's reference length as
min/max_new_tokens, so the decode work matches the real model's. Bounded by --duration (and
--max-requests); refuses any host but this machine.

Each request carries a source no earlier request did (bench.common.distinct_sentences, drawn in
order), so a server with its sentence cache on (the image as shipped) answers none from it while a
run stays within `sentences`; past that the draw starts over and the result counts the repeats.
bench.run_all and bench.studies.layout serve archives packed with the cache off all the same
(bench.common.archive_with).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil
import requests

from bench.cli import BenchCli, Progress
from bench.common import distinct_sentences, load_model_dir, run_folder, writable, write_result
from bench.cpu_account import MARKS_ENV, Roles, Window, account, marked_rate, snapshots
from bench.process_memory import host_memory_mb
from handlers.model.heap_trim import IDLE_TRIM_SECONDS
from serving.client import read_key

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
say = Progress("load")


@dataclass(frozen=True)
class LoadSpec:
    host: str
    users: int = 100
    spawn_rate: float = 100.0
    duration: str = "30s"
    num_beams: int | None = None
    version: str | None = None
    key_file: Path = Path("key_file.json")
    max_requests: int = 0
    # Distinct sources to draw from, each once: more than any run here sends.
    sentences: int = 20_000
    label: str = "load"
    # bench.mixed: this many of `users` send paragraphs of document_sentences sentences instead.
    document_users: int = 0
    document_sentences: int = 40
    # Seconds between one single-sentence user's requests (0: saturation, the next at once).
    pace_seconds: float = 0.0
    # "zh_en": our inference API; "libretranslate": LibreTranslate's POST /translate, as its clients
    # send it (bench.libretranslate_peer: that server forces the lengths itself).
    api: str = "zh_en"

    @property
    def path(self) -> str:
        if self.api == "libretranslate":
            return "/translate"
        return "/predictions/zh_en" + (f"/{self.version}" if self.version else "")


def load_label(server: str, beams: int, users: int, suffix: str = "") -> str:
    """A Locust run's file stem: `load-<server>-<greedy|beamN>-u<users>` (bench.report reads `load-*`)."""
    return f"load-{server}-{'greedy' if beams == 1 else f'beam{beams}'}-u{users}{suffix}"


def run_load(
    spec: LoadSpec,
    results_dir: Path | None = None,
    model_dir: Path | None = None,
    command: str | None = None,
    serving_pids: Callable[[], Sequence[int]] | None = None,
    cpu_roles: Roles | None = None,
) -> dict[str, Any]:
    """Run Locust headless against `spec.host`; return (and write) the summary.

    `command` signs the result: the bench command that ran this load (default: this process's).
    `serving_pids`: the server's processes, whose memory (with their children) is read the moment
    the load ends, while everything the load grew is still held.
    `cpu_roles`: the server's processes by kind, whose CPU time is accounted per request beside
    Locust's and the host's over the run's steady middle (bench.cpu_account; runs of 15 s or more
    without --max-requests).
    """
    if urlparse(spec.host).hostname not in LOOPBACK:
        raise SystemExit(f"bench.load only targets this machine (127.0.0.1/localhost), not {spec.host}")
    identity = _probe(spec)
    results_dir = run_folder() if results_dir is None else results_dir
    results_dir.mkdir(parents=True, exist_ok=True)
    prefix = results_dir / spec.label
    writable(Path(f"{prefix}_stats.csv"))  # Locust would write over a committed run's files
    with tempfile.TemporaryDirectory(prefix="zh_en_load_") as tmp:
        sentences_file = Path(tmp) / "sentences.json"
        _write_sentences(sentences_file, spec.sentences, model_dir)
        env = {
            **os.environ,
            "ZH_EN_SENTENCES": str(sentences_file),
            "ZH_EN_PATH": spec.path,
            "ZH_EN_KEY_FILE": str(spec.key_file.resolve()),
            "ZH_EN_OPTIONS": json.dumps({"num_beams": spec.num_beams} if spec.num_beams else {}),
            "ZH_EN_FORCE_LENGTHS": "1" if identity["standin"] else "0",
            "ZH_EN_MAX_REQUESTS": str(spec.max_requests),
            "ZH_EN_DOCUMENT_USERS": str(spec.document_users),
            "ZH_EN_DOCUMENT_SENTENCES": str(spec.document_sentences),
            "ZH_EN_PACE_SECONDS": str(spec.pace_seconds),
            "ZH_EN_API": spec.api,
        }
        lengths = "stand-in: reference lengths" if identity["standin"] else "real model"
        say(
            f"locust: {spec.users} users, {spec.duration}, num_beams={spec.num_beams or 'model default'}, "
            f"{identity['version']} ({lengths})"
        )
        marks = Path(tmp) / "marks"
        window = None if spec.max_requests else Window.of(spec.duration)
        locust = subprocess.Popen(
            _locust_command(spec, prefix), env={**env, MARKS_ENV: str(marks)}, stdout=subprocess.DEVNULL
        )
        try:
            ends = snapshots(locust, marks, cpu_roles or dict, window) if window else None
            locust.wait()
        finally:
            if locust.poll() is None:
                locust.kill()
                locust.wait()
        rate = marked_rate(marks) if ends else None
        cpu = account(*ends, rate, psutil.cpu_count() or 1) if ends and rate else None
    memory: dict[str, Any] = {}
    if serving_pids is not None:
        memory["host_memory"] = host_memory_mb(serving_pids())
        # Again once the server has been idle long enough to give its batches' heap back
        # (handlers.model.heap_trim): what it holds between bursts, not while it works.
        time.sleep(IDLE_TRIM_SECONDS + 2)
        memory["host_memory_idle"] = host_memory_mb(serving_pids())
    aggregated = _aggregated(Path(f"{prefix}_stats.csv"))
    summary = {
        **aggregated,
        "distinct_sentences": spec.sentences,
        # Requests past the pool resend a source, which a sentence cache may answer.
        "repeated_requests": max(0, aggregated["requests"] - spec.sentences),
        **({"by_name": _by_name(Path(f"{prefix}_stats.csv"))} if spec.document_users else {}),
        "users": spec.users,
        "spawn_rate": spec.spawn_rate,
        "duration": spec.duration,
        "num_beams": spec.num_beams,
        **identity,
        **memory,
        **({"cpu": cpu} if cpu else {}),
        "csv": [
            str(path.relative_to(results_dir)) for path in sorted(results_dir.glob(f"{spec.label}_*.csv"))
        ],
    }
    path = write_result(spec.label, summary, results_dir, command)
    print(
        f"{spec.label}: {summary['requests']} requests, {summary['failures']} failed, "
        f"{summary['rps']:.1f} req/s, p50 {summary['p50_ms']:.0f} ms, p95 {summary['p95_ms']:.0f} ms, "
        f"p99 {summary['p99_ms']:.0f} ms -> {path}"
    )
    return summary


def _locust_command(spec: LoadSpec, prefix: Path) -> list[str]:
    locust = Path(sys.executable).with_name("locust")
    return [
        str(locust if locust.exists() else "locust"),
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "--users",
        str(spec.users),
        "--spawn-rate",
        str(spec.spawn_rate),
        "--run-time",
        spec.duration,
        "--stop-timeout",
        "30",
        "--host",
        spec.host,
        "--csv",
        str(prefix),
        "--loglevel",
        "WARNING",
    ]


def _probe(spec: LoadSpec) -> dict[str, Any]:
    if spec.api == "libretranslate":
        return _probe_libretranslate(spec)
    key = read_key(spec.key_file, "inference")
    response = requests.post(
        spec.host + spec.path,
        json={"text": "你好。"},
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=120,
    )
    if response.status_code != 200:
        raise SystemExit(f"probe request failed: {response.status_code} {response.text[:300]}")
    body = response.json()
    return {key: body.get(key) for key in ("model", "version", "variant", "decoder", "standin")}


def _probe_libretranslate(spec: LoadSpec) -> dict[str, Any]:
    """The identity fields ours answer with, from LibreTranslate's /languages (a stand-in package's
    names say so: bench.libretranslate_peer)."""
    body = {"q": "你好。", "source": "zh", "target": "en", "format": "text"}
    response = requests.post(spec.host + spec.path, json=body, timeout=120)
    if response.status_code != 200 or "translatedText" not in response.json():
        raise SystemExit(f"probe request failed: {response.status_code} {response.text[:300]}")
    languages = requests.get(spec.host + "/languages", timeout=30).json()
    standin = any("stand-in" in language.get("name", "") for language in languages)
    return {
        "model": "libretranslate",
        "version": None,
        "variant": "argos",
        "decoder": "ctranslate2",
        "standin": standin,
    }


def reference_lengths(count: int, model_dir: Path | None) -> dict[str, int]:
    """Source text -> reference tokens for the `count` sentences a load run draws from."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir or load_model_dir("synthetic"))
    return {s.source: s.reference_tokens for s in distinct_sentences(tokenizer, count)}


def _write_sentences(path: Path, count: int, model_dir: Path | None) -> None:
    """Sources with their reference lengths in target tokens (used only against a stand-in)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir or load_model_dir("synthetic"))
    sentences = distinct_sentences(tokenizer, count)
    path.write_text(json.dumps([{"source": s.source, "tokens": s.reference_tokens} for s in sentences]))


def _aggregated(stats_csv: Path, name: str = "Aggregated") -> dict[str, Any]:
    with stats_csv.open() as handle:
        row = next(r for r in csv.DictReader(handle) if r["Name"] == name)
    return {
        "requests": int(row["Request Count"]),
        "failures": int(row["Failure Count"]),
        "rps": round(float(row["Requests/s"]), 2),
        "p50_ms": float(row["50%"]),
        "p95_ms": float(row["95%"]),
        "p99_ms": float(row["99%"]),
        "mean_ms": round(float(row["Average Response Time"]), 1),
    }


def _by_name(stats_csv: Path) -> dict[str, dict[str, Any]]:
    """Each request name's own figures (the single sentences' path, "document")."""
    with stats_csv.open() as handle:
        names = [row["Name"] for row in csv.DictReader(handle) if row["Name"] != "Aggregated"]
    return {name: _aggregated(stats_csv, name) for name in names}


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("load", __doc__, results_dir=True)
    parser = cli.parser
    parser.add_argument("--host", default="http://127.0.0.1:8080")
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--spawn-rate", type=float, default=100.0)
    parser.add_argument("--duration", default="30s", help="Locust run time, e.g. 30s, 2m")
    parser.add_argument("--num-beams", type=int)
    parser.add_argument("--version", help="e.g. 1.0-fp32; default: the default version")
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--max-requests", type=int, default=0, help="stop after this many (0: no cap)")
    parser.add_argument("--label", default="load")
    parser.add_argument("--model-dir", type=Path, help="tokenizer for reference lengths (stand-in)")
    args = cli.parse(argv)
    spec = LoadSpec(
        args.host,
        args.users,
        args.spawn_rate,
        args.duration,
        args.num_beams,
        args.version,
        args.key_file,
        args.max_requests,
        label=args.label,
    )
    summary = run_load(spec, args.results_dir, args.model_dir, cli.command)
    return 0 if summary["failures"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
