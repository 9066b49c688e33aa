"""Turn a run folder's *.json into plots and its README.md (default: the newest run folder).

    python -m bench.report [--results-dir bench/results]

Plots: latency by rung (greedy and beam 4), throughput vs users (int8), fp32 vs int8 under load.
The README names the machine, the date of each result and the commands that produced them, read
from each result's signature (bench.signature).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench.cli import BenchCli
from bench.common import newest_run, writable
from bench.exactness import markdown as exactness_markdown
from bench.ladder_targets import markdown as latency_markdown
from bench.signature import UnsignedResult, command_of

STANDIN_LABEL = "offline stand-in (random weights, reference-length outputs)"
# Not rerun by `make bench`: what each measured and found, with its frozen result files.
STUDIES = (
    "Sentence splitters, int8 kernels, the row budget curve, the worker layout (`make layout`), the "
    "sentence cache under load and one article-sized request: what each found, its frozen results and "
    "the doc that cites it are in [bench/studies/README.md](../studies/README.md)."
)


def load_results(results_dir: Path) -> dict[str, dict[str, Any]]:
    """Every result here, each refused unless it carries its signature."""
    results = {path.stem: json.loads(path.read_text()) for path in sorted(results_dir.glob("*.json"))}
    for name, result in results.items():
        if "signature" not in result:
            raise UnsignedResult(f"{results_dir / name}.json has no signature: re-measure it (make bench)")
    return results


# bench.run_all's batch step serves the same load again once the job has run (its label ends so):
# the job's ratio is taken against both server runs, which bracket it on a host that drifts.
AFTER_BATCH = "-after-batch"


def after_batch(load: dict[str, Any]) -> bool:
    return str(load["label"]).endswith(AFTER_BATCH)


def loads_of(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [{"label": name, **result} for name, result in results.items() if name.startswith("load-")]
    return sorted(
        rows, key=lambda r: (r["variant"] or "", r.get("decoder") or "", r["num_beams"] or 0, r["users"])
    )


def plot_latency(latency: dict[str, Any], out: Path) -> Path:
    ladders = latency["ladders"]
    figure, axes = plt.subplots(1, len(ladders), figsize=(6 * len(ladders), 4), squeeze=False)
    for axis, (beams, ladder) in zip(axes[0], ladders.items(), strict=True):
        rungs = [row for row in ladder["rungs"] if row["speedup_p50"] is not None]  # batch rungs: per batch
        colors = ["#c44e52" if "CTranslate2" in r.get("engine", "") else "#4c72b0" for r in rungs]
        axis.bar([f"{r['rung']}" for r in rungs], [r["p50_ms"] for r in rungs], color=colors)
        axis.set_title(f"{'greedy' if beams == '1' else f'beam {beams}'}: p50 per sentence")
        axis.set_xlabel(
            "rung: 1 fp32 pad-128, 2 fp32, 3 int8, 5 int8 HTTP, 6 CTranslate2,\n"
            "8 int8 generate(), 11 CTranslate2 + map, 13 int8 oneDNN"
        )
        axis.set_ylabel("ms")
    return _save(figure, out / "latency_by_rung.png", latency)


def plot_users(loads: list[dict[str, Any]], out: Path) -> Path | None:
    sweep = [r for r in loads if r["variant"] == "int8" and r["num_beams"] == 1]
    if len(sweep) < 2:
        return None
    figure, axis = plt.subplots(figsize=(6, 4))
    users = [r["users"] for r in sweep]
    axis.plot(users, [r["rps"] for r in sweep], "o-", label="requests/s")
    axis.set_xlabel("Locust users (no wait)")
    axis.set_ylabel("requests/s")
    twin = axis.twinx()
    twin.plot(users, [r["p50_ms"] for r in sweep], "s--", color="#c44e52", label="p50 ms")
    twin.set_ylabel("p50 ms")
    axis.set_title("int8, greedy: throughput vs users")
    figure.legend(loc="center right", bbox_to_anchor=(0.85, 0.45))
    return _save(figure, out / "throughput_vs_users.png", sweep[0])


def plot_variants(loads: list[dict[str, Any]], out: Path) -> Path | None:
    top = max((r["users"] for r in loads), default=0)
    rows = [r for r in loads if r["users"] == top and not after_batch(r)]
    if not rows:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [f"{r['variant']}\n{r.get('decoder') or ''}\n{decode_name(r['num_beams'])}" for r in rows]
    colors = [
        "#c44e52" if r.get("decoder") == "generate" else "#55a868" if r["variant"] == "int8" else "#8172b2"
        for r in rows
    ]
    left.bar(names, [r["rps"] for r in rows], color=colors)
    left.set_title(f"requests/s at {top} users")
    right.bar(names, [r["p50_ms"] for r in rows], color=colors)
    right.set_title(f"p50 ms at {top} users")
    return _save(figure, out / "fp32_vs_int8.png", rows[0])


def _save(figure: Any, path: Path, result: dict[str, Any]) -> Path:
    if result.get("standin"):
        figure.text(0.5, 0.005, STANDIN_LABEL, ha="center", fontsize=8, color="#c44e52")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    figure.savefig(writable(path), dpi=110)
    plt.close(figure)
    return path


def load_table(loads: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | decoder | decoding | users | requests | failed | req/s | p50 ms | p95 ms | p99 ms "
        "| host memory, MB | host CPU ms a request | date |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in loads:
        when = " (after the batch job)" if after_batch(r) else ""
        lines.append(
            f"| {r['variant']} | {r.get('decoder') or '-'}{when} "
            f"| {decode_name(r['num_beams'])} | {r['users']} "
            f"| {r['requests']} | {r['failures']} | {r['rps']} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} "
            f"| {r['p99_ms']:.0f} | {host_memory(r)} | {host_cpu(r)} | {r['date']} |"
        )
    return "\n".join(lines)


def host_cpu(load: dict[str, Any]) -> str:
    """The host's CPU ms a request over the load's steady middle, and the largest kind of process's
    share of it (bench.cpu_account); "-" for loads from before the account or too short for it."""
    cpu = load.get("cpu") or {}
    host, kinds = cpu.get("host_ms_per_request"), cpu.get("ms_per_request") or {}
    if not host:
        return "-"
    role, ms = max(kinds.items(), key=lambda item: item[1] or 0.0)
    return f"{host} ({role} {ms})"


def host_memory(load: dict[str, Any]) -> str:
    """PSS of the server's processes as the load ended (bench.process_memory.host_memory_mb)."""
    memory, idle = load.get("host_memory"), load.get("host_memory_idle")
    if not memory:
        return "-"
    after = f", idle {idle['pss_mb']}" if idle else ""
    return f"{memory['pss_mb']}{after} ({memory['processes']} processes)"


def batch_section(batch: dict[str, Any], loads: list[dict[str, Any]]) -> list[str]:
    """The batch job's engines beside the server under 100 users at its beams (one sentence per
    request: req/s is sentences/s)."""
    runs = batch["runs"]
    beams = batch.get("num_beams", 4)
    served = [r for r in loads if r["variant"] == "int8" and r["num_beams"] == beams and r["users"] == 100]
    before = [r for r in served if not after_batch(r)][:1]
    after = [r for r in served if after_batch(r)][:1]
    lines = [
        f"## Batch prediction ({batch['date']}, {commands([batch])})",
        "",
        f"{batch['n']} Tatoeba sentences, {decode_name(beams)}, output lengths: {batch['output_lengths']}; "
        "a whole run includes loading the model (every worker's), Ray's own start is apart "
        f"({batch['ray_start_seconds']} s); the fifth column takes one model load "
        f"({batch.get('model_load_seconds', '-')} s, timed apart) off the run; the sixth takes the "
        "engine's whole start-up off (one sentence through a fresh engine: its process, imports and load).",
        "",
        *batch_runs_table(runs),
    ]
    for load in before:
        lines.append(f"| the server, 100 Locust users ({load['label']}, same run) | | | {load['rps']} | | |")
    for load in after:
        lines.append(f"| the server again, once the job had run ({load['label']}) | | | {load['rps']} | | |")
    bracket = [load["rps"] for load in before + after if load["rps"]]
    if bracket:
        per_core = ("local_per_core", "ray_per_core")
        best = max(runs[name]["sentences_per_s"] for name in per_core if name in runs)
        ratio = best / (sum(bracket) / len(bracket))
        line = f"Batch job (whole run, best engine per core) / server: **{ratio:.2f}x**"
        if len(bracket) == 2:
            line += (
                f" against the mean of the server's runs before and after the job "
                f"({best / bracket[0]:.2f}x and {best / bracket[1]:.2f}x against each)"
            )
        lines += ["", line, ""]
    lines += cpu_per_sentence(runs.get("local_per_core"), before + after)
    ray_cost = runs["ray_one_actor"]["sentences_per_s"] / runs["in_process"]["sentences_per_s"]
    line = f"Ray with one actor / in process (the same layout): **{ray_cost:.2f}x**"
    steady = batch.get("ratios", {}).get("ray_one_actor_vs_in_process_after_start_up")
    if steady is not None:
        line += f"; each engine's start-up taken off: **{steady:.2f}x**"
    lines.append(line)
    return lines


def batch_runs_table(runs: dict[str, Any]) -> list[str]:
    """The batch job's runs, a row each (bench.batch_throughput prints it too)."""
    return [
        "| run | sentences | seconds | sentences/s, whole run | after one model load "
        "| after the engine's start-up |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {name.replace('_', ' ')} | {figures['sentences']} | {figures['seconds']} "
            f"| {figures['sentences_per_s']} | {figures.get('sentences_per_s_after_load') or '-'} "
            f"| {figures.get('sentences_per_s_after_start_up') or '-'} |"
            for name, figures in runs.items()
        ),
    ]


def cpu_per_sentence(job: dict[str, Any] | None, served: list[dict[str, Any]]) -> list[str]:
    """The job's CPU per sentence beside the server's per request, by kind of process, over each
    load's steady middle (bench.cpu_account). With both keeping the host busy, the host's CPU per
    request over the job's per sentence is the ratio of their rates that the accounts predict."""
    accounted = [load for load in served if load.get("cpu", {}).get("host_ms_per_request")]
    if not job or not accounted:
        return []
    job_ms = 1000 * job["cpu_seconds_here_and_children"] / job["sentences"]
    lines = [
        "| CPU ms per sentence | the job (whole run, its model loads inside) | "
        + " | ".join(f"the server ({load['label']})" for load in accounted)
        + " |",
        "|---|---:|" + "---:|" * len(accounted),
    ]
    roles = list(dict.fromkeys(role for load in accounted for role in load["cpu"]["ms_per_request"]))
    for role in roles:
        cells = " | ".join(str(load["cpu"]["ms_per_request"].get(role, "-")) for load in accounted)
        lines.append(f"| {role} | | {cells} |")
    hosts = [load["cpu"]["host_ms_per_request"] for load in accounted]
    lines.append(f"| whole host | {job_ms:.2f} | " + " | ".join(str(host) for host in hosts) + " |")
    busy = ", ".join(f"{load['cpu']['host_busy_share']:.0%}" for load in accounted)
    predicted = " and ".join(f"{host / job_ms:.2f}x" for host in hosts)
    return [
        "",
        *lines,
        "",
        f"The job spends {job_ms:.2f} ms of CPU a sentence, the server {', '.join(map(str, hosts))} ms "
        f"of the host a request (host busy {busy}): with both keeping the host busy, the job's rate is "
        f"{predicted} the server's.",
        "",
    ]


def decode_name(beams: int | None) -> str:
    return "model default" if beams is None else "greedy" if beams == 1 else f"beam {beams}"


def decoder_comparison(loads: list[dict[str, Any]]) -> list[str]:
    """int8 fast against int8 generate() at the same users and decode: req/s ratio and p95/p50."""
    lines = []
    ours = (r for r in loads if r["variant"] == "int8" and r.get("decoder") == "fast" and not after_batch(r))
    for fast in ours:
        same = (r for r in loads if r["variant"] == "int8" and r.get("decoder") == "generate")
        other = next(
            (r for r in same if (r["num_beams"], r["users"]) == (fast["num_beams"], fast["users"])), None
        )
        if other is None or not other["rps"]:
            continue
        lines.append(
            f"- {decode_name(fast['num_beams'])}, {fast['users']} users: fast {fast['rps']} req/s against "
            f"generate() {other['rps']}: **{fast['rps'] / other['rps']:.2f}x**; p95/p50 "
            f"{fast['p95_ms'] / fast['p50_ms']:.2f} (generate() {other['p95_ms'] / other['p50_ms']:.2f}); "
            f"failed {fast['failures']} / {other['failures']}"
        )
    return lines


def bleu_table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| run | model | n | BLEU | chrF | meaningful | signature |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name.startswith("bleu-"):
            lines.append(
                f"| {name} | {r['model']} ({r['variant'] or '-'}) | {r['n']} | {r['bleu']} | {r['chrf']} "
                f"| {'yes' if r['meaningful'] else 'NO (stand-in)'} | `{r['bleu_signature']}` |"
            )
    return "\n".join(lines)


def machine_of(result: Mapping[str, Any]) -> dict[str, Any]:
    """The machine a result names, from its signature."""
    machine: dict[str, Any] = result["signature"]["machine"]
    return machine


def commands(results: Iterable[Mapping[str, Any]]) -> str:
    """The distinct commands of `results` in backticks, in order, each from its signature."""
    return ", ".join(f"`{command}`" for command in dict.fromkeys(command_of(r) for r in results))


def write_readme(results: dict[str, dict[str, Any]], plots: list[Path], out: Path) -> Path:
    any_result = next(iter(results.values()))
    machine = machine_of(any_result)
    standin = any(r.get("standin") for r in results.values())
    parts = [
        "# Benchmark results",
        "",
        "Generated by `python -m bench.report` from the JSON files here; produced by `make bench` "
        "(`python -m bench.run_all`). Each JSON names its date and machine.",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['system']}, Python "
        f"{machine['python']}, torch {machine['torch']}.",
    ]
    if standin:
        parts += [
            "",
            f"**Model: {STANDIN_LABEL}.** Quality scores of the stand-in are meaningless; its timings "
            "transfer to the real opus-mt-zh-en because shapes, tokenization and output lengths match.",
        ]
    parts += ["", "## Quality", "", bleu_table(results)]
    if "latency" in results:
        latency = results["latency"]
        parts += [
            "",
            f"## Latency ladder ({latency['date']})",
            "",
            f"{commands([latency])}; output lengths: {latency['output_lengths']}.",
            latency_markdown(latency),
        ]
    loads = loads_of(results)
    if loads:
        parts += [
            "",
            "## Load (Locust, headless, users send without waiting)",
            "",
            f"{commands(loads)}, one server "
            "per variant, laid out as its config/zh_en_*.yaml ships (docs/SCHEDULING.md). Host memory: "
            "PSS summed over the server's serving processes and their children (our worker and its "
            "step partitions; LibreTranslate's one process) the moment the load ended, then after "
            "3 s idle (our workers give their batches' heap back after 1 s): a page shared by fork or "
            "by a mapped file counts once.",
            "",
            load_table(loads),
        ]
        if comparison := decoder_comparison(loads):
            parts += [
                "",
                "Fast decoder against `decoder: generate` (int8, same run, same load):",
                "",
                *comparison,
            ]
    if "exactness" in results:
        exact = results["exactness"]
        parts += [
            "",
            f"## Exactness and batch invariance ({exact['date']}, {commands([exact])})",
            "",
            exactness_markdown(exact),
        ]
    for name in ("faults", "faults-step"):
        if name not in results:
            continue
        faults = results[name]
        parts += [
            "",
            f"## Operations under load ({faults['date']}, {commands([faults])})",
            "",
            f"- {len(faults['swap']['swaps'])} version swaps in {faults['swap']['seconds']} s: "
            f"{faults['swap']['failed']} of {faults['swap']['requests']} requests failed.",
            f"- one worker killed: {faults['kill']['failed']} of {faults['kill']['requests']} failed; "
            f"/ping Healthy after {faults['kill']['healthy_after_s']} s, all workers READY after "
            f"{faults['kill']['all_ready_after_s']} s.",
        ]
    if "mixed" in results:
        parts += ["", f"## Schedulers ({results['mixed']['date']}): [mixed.md](mixed.md)"]
    if "batch_throughput" in results:
        parts += ["", *batch_section(results["batch_throughput"], loads)]
    parts += ["", "## Finished studies", "", STUDIES]
    parts += ["", "## Plots", ""] + [f"![{plot.stem}]({plot.name})" for plot in plots]
    path = writable(out / "README.md")
    path.write_text("\n".join(parts) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("report", __doc__, results_dir=True)
    args = cli.parse(argv)
    if "--results-dir" not in cli.argv:  # nothing new to measure: the newest run's folder
        args.results_dir = newest_run()
    results = load_results(args.results_dir)
    if not results:
        raise SystemExit(f"no results in {args.results_dir}: run `make bench` first")
    loads = loads_of(results)
    plots = [p for p in (plot_users(loads, args.results_dir), plot_variants(loads, args.results_dir)) if p]
    if "latency" in results:
        plots.insert(0, plot_latency(results["latency"], args.results_dir))
    path = write_readme(results, plots, args.results_dir)
    print(f"report: {path} and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
