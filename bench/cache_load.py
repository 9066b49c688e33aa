"""The sentence cache under load: Locust with unique sentences (cold) against Zipf repeats.

    python -m bench.cache_load [--model synthetic|hub id|dir] [--users 100] [--duration 30s]
                               [--num-beams B] [--zipf-s 1.1] [--seed 0] [--results-dir DIR]

Serves the int8 archive with its yaml's sentence cache (config/zh_en_int8.yaml), packed into a
temporary store, a fresh server per run so each starts with empty caches, and runs two bounded
Locust runs on 127.0.0.1 with the same users and duration (bench.load's machinery, the locustfile's
StreamTranslator):
- cold: every request a sentence not sent before (the Tatoeba sources, deduplicated, shuffled);
- zipf: P(rank k) ~ k^-s over the same sentences in a seeded random order, as documents repeat
  headings, boilerplate and UI strings.
Each run reports req/s, p50/p95 and the hit rate three ways: from the responses' "stats" (cached /
translated sentences), from the server's cache counters on /metrics (after minus before), and
the repeats in the stream itself, the most that one cache shared by all workers could answer
(each worker keeps its own). On the stand-in every output is forced to its reference length.
Writes <results-dir>/cache_load.json and cache_load.md; progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import requests
import yaml

from archive.build import CONFIG_DIR, MODEL_NAME
from bench.cli import BenchCli, Progress
from bench.common import DEFAULT_MODEL, Sentence, archive_with, is_standin, sample_sentences
from bench.load import LoadSpec, _aggregated, _locust_command, _probe
from bench.signature import command_of
from serving.torchserve import TorchServe

COMMAND = "python -m bench.cache_load"
USER_CLASS = "StreamTranslator"  # bench/locustfile.py
METRICS_SETTLE_S = 30.0  # the frontend reads worker metrics from their log stream, a little later
say = Progress("cache_load")


@dataclass(frozen=True)
class Scenario:
    users: int = 100
    duration: str = "30s"
    num_beams: int | None = None
    zipf_s: float = 1.1
    seed: int = 0
    # Zipf draws prepared; a run that spends them ends early (it is bounded either way).
    zipf_length: int = 50_000


def unique_sentences(sentences: Sequence[Sentence]) -> list[Sentence]:
    """The first of each source: a repeated source would be a cache hit in the cold run."""
    seen: dict[str, Sentence] = {}
    for sentence in sentences:
        seen.setdefault(sentence.source, sentence)
    return list(seen.values())


def cold_order(count: int, seed: int) -> list[int]:
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def zipf_order(count: int, s: float, seed: int, length: int) -> list[int]:
    """`length` draws, rank k with probability ~ k^-s; ranks go to sentences in a seeded order."""
    rng = random.Random(seed)
    ranked = cold_order(count, seed + 1)  # popularity independent of file order
    weights = list(accumulate(k**-s for k in range(1, count + 1)))
    return rng.choices(ranked, cum_weights=weights, k=length)


def repeats(order: Sequence[int]) -> float:
    """Share of draws that repeat an earlier one: the hit rate of one cache that never evicts."""
    return round(1 - len(set(order)) / len(order), 4) if order else 0.0


def bodies(sentences: Sequence[Sentence], num_beams: int | None, standin: bool) -> list[dict[str, Any]]:
    """Request bodies; on the stand-in each output is forced to its reference's token length."""
    out = []
    for sentence in sentences:
        body: dict[str, Any] = {"text": sentence.source}
        if num_beams:
            body["num_beams"] = num_beams
        if standin:
            body["min_new_tokens"] = body["max_new_tokens"] = sentence.reference_tokens
        out.append(body)
    return out


def cache_counters(metrics_text: str) -> dict[str, float]:
    """Hits and misses summed over workers and labels, from Prometheus text (names *CacheHits*)."""
    totals = {"hits": 0.0, "misses": 0.0}
    for name, value in re.findall(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$", metrics_text, re.M):
        flat = name.lower().replace("_", "")
        for kind in totals:
            if f"cache{kind}" in flat:
                totals[kind] += float(value)
    return totals


def hit_rate(hits: float, total: float) -> float | None:
    return round(hits / total, 4) if total else None


def measure(
    server: TorchServe, name: str, stream: dict[str, Any], scenario: Scenario, workdir: Path
) -> dict[str, Any]:
    """One bounded Locust run of `stream` against `server`: load figures and hit rates."""
    spec = LoadSpec(
        server.client.endpoints.inference,
        scenario.users,
        float(scenario.users),
        scenario.duration,
        scenario.num_beams,
        key_file=server.key_file,
        label=f"cache_load-{name}",
    )
    identity = _probe(spec)  # also refuses anything but loopback
    # Other work on a shared host moves req/s: each run records the load it met.
    load_average = [round(x, 2) for x in os.getloadavg()]
    before = _settled_counters(server, None)
    stream_file, counts_file = workdir / f"{name}-stream.json", workdir / f"{name}-counts.json"
    stream_file.write_text(json.dumps(stream))
    env = {
        **os.environ,
        "ZH_EN_SENTENCES": str(stream_file),  # read at import by the locustfile's other user
        "ZH_EN_STREAM": str(stream_file),
        "ZH_EN_STREAM_COUNTS": str(counts_file),
        "ZH_EN_PATH": spec.path,
        "ZH_EN_KEY_FILE": str(spec.key_file.resolve()),
    }
    say(f"{name}: locust, {scenario.users} users, {scenario.duration}, {identity['version']}")
    prefix = workdir / spec.label
    command = [*_locust_command(spec, prefix), USER_CLASS]
    subprocess.run(command, env=env, check=False, stdout=subprocess.DEVNULL)
    counts = json.loads(counts_file.read_text())
    after = _settled_counters(server, before["hits"] + before["misses"] + counts["translated"])
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    sent = stream["order"][: counts["sent"]]
    return {
        **_aggregated(Path(f"{prefix}_stats.csv")),
        **identity,
        "load_average_at_start": load_average,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "stream_spent": counts["sent"] >= len(stream["order"]),
        "distinct_sentences": len(set(sent)),
        "stream_repeats": repeats(sent),
        "responses": counts,
        "response_hit_rate": hit_rate(counts["cached"], counts["translated"]),
        "metrics": {"hits": hits, "misses": misses, "hit_rate": hit_rate(hits, hits + misses)},
    }


def _settled_counters(server: TorchServe, expected: float | None) -> dict[str, float]:
    """/metrics cache counters, once they reach `expected` lookups (or METRICS_SETTLE_S passed)."""
    deadline = time.monotonic() + METRICS_SETTLE_S
    while True:
        text = requests.get(f"{server.client.endpoints.metrics}/metrics", timeout=30).text
        counters = cache_counters(text)
        if expected is None or counters["hits"] + counters["misses"] >= expected:
            return counters
        if time.monotonic() > deadline:
            say(f"/metrics counted {counters} after {METRICS_SETTLE_S:.0f}s, expected {expected}")
            return counters
        time.sleep(1.0)


def run(model_dir: Path, scenario: Scenario, handler: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    sentences = unique_sentences(sample_sentences(AutoTokenizer.from_pretrained(model_dir)))
    standin = is_standin(model_dir)
    streams = {
        "cold": cold_order(len(sentences), scenario.seed),
        "zipf": zipf_order(len(sentences), scenario.zipf_s, scenario.seed, scenario.zipf_length),
    }
    payload = bodies(sentences, scenario.num_beams, standin)
    config = yaml.safe_load((CONFIG_DIR / f"{MODEL_NAME}_int8.yaml").read_text())
    cache = {k: v for k, v in {**config["handler"], **handler}.items() if k.startswith("sentence_cache")}
    say(f"{len(sentences)} distinct Tatoeba sentences; int8 with {cache}, {config['minWorkers']} workers")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="zh_en_cache_load_") as tmp:
        store, archive = archive_with("int8", model_dir, Path(tmp), handler)
        for name, order in streams.items():
            # A fresh server per run: the cold run's sentences must not warm the Zipf run's caches.
            with TorchServe(store, Path(tmp) / f"server-{name}", models=[archive]) as server:
                runs[name] = measure(server, name, {"bodies": payload, "order": order}, scenario, Path(tmp))
            r = runs[name]
            say(
                f"{name}: {r['requests']} requests, {r['failures']} failed, {r['rps']} req/s, "
                f"p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms, hit rate {r['response_hit_rate']} "
                f"(responses), {r['metrics']['hit_rate']} (/metrics), stream repeats {r['stream_repeats']}"
            )
    return {
        "command": COMMAND,  # as before signatures; the signature holds the whole line
        "model": str(model_dir),
        "standin": standin,
        "output_lengths": "reference lengths (stand-in)" if standin else "natural",
        "users": scenario.users,
        "duration": scenario.duration,
        "num_beams": scenario.num_beams,
        "zipf_s": scenario.zipf_s,
        "seed": scenario.seed,
        "sentences": len(sentences),
        "workers": config["minWorkers"],
        "cache": cache,
        "runs": runs,
        "rps_ratio": round(runs["zipf"]["rps"] / runs["cold"]["rps"], 2) if runs["cold"]["rps"] else None,
    }


def markdown(result: dict[str, Any]) -> str:
    decode = "model default" if result["num_beams"] is None else f"num_beams {result['num_beams']}"
    lines = [
        f"{result['date']}, {result['machine']['cpu']} ({result['machine']['cores']} cores), "
        f"`{command_of(result, COMMAND)}`: "
        f"int8, {result['workers']} workers, each with its own cache ({result['cache']}); {result['users']} "
        f"Locust users, no wait, {result['duration']} per run, {decode}, output lengths "
        f"{result['output_lengths']}; {result['sentences']} distinct Tatoeba sentences, Zipf s = "
        f"{result['zipf_s']} (seed {result['seed']}).",
        "",
        "| run | requests | failed | req/s | p50 ms | p95 ms | hit rate (responses) | hit rate (/metrics) "
        "| repeats in the stream | load average (1 min) at start, end |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["runs"].items():
        lines.append(
            f"| {name} | {r['requests']} | {r['failures']} | {r['rps']} | {r['p50_ms']:.0f} "
            f"| {r['p95_ms']:.0f} "
            f"| {_percent(r['response_hit_rate'])} | {_percent(r['metrics']['hit_rate'])} "
            f"| {_percent(r['stream_repeats'])} "
            f"| {r.get('load_average_at_start', ['-'])[0]}, {r.get('load_average_at_end', ['-'])[0]} |"
        )
    if result.get("rps_ratio"):
        lines += ["", f"Zipf against cold: **{result['rps_ratio']}x** the requests/s."]
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("cache_load", __doc__, model=DEFAULT_MODEL, results_dir=True)
    cli.parser.add_argument("--users", type=int, default=Scenario.users)
    cli.parser.add_argument("--duration", default=Scenario.duration, help="Locust run time per run, e.g. 30s")
    cli.parser.add_argument("--num-beams", type=int, help="default: the model's own (beam 4)")
    cli.parser.add_argument("--zipf-s", type=float, default=Scenario.zipf_s)
    cli.parser.add_argument("--seed", type=int, default=Scenario.seed)
    cli.parser.add_argument("--cache-entries", type=int, help="sentence_cache_entries; default: the yaml's")
    args = cli.parse(argv)
    scenario = Scenario(args.users, args.duration, args.num_beams, args.zipf_s, args.seed)
    handler = {} if args.cache_entries is None else {"sentence_cache_entries": args.cache_entries}
    result = run(cli.model_dir(), scenario, handler)
    path = cli.write("cache_load", result)
    (args.results_dir / "cache_load.md").write_text(
        "# Sentence cache under load\n\n" + markdown(json.loads(path.read_text()))
    )
    print(markdown(json.loads(path.read_text())))
    return 0 if all(r["failures"] == 0 for r in result["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
