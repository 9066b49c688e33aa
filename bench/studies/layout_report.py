"""bench.studies.layout's results as people read them: the ranked table, the markdown report, the bar chart,
and the winner as model-config values. Works on the result dict (as written to layout.json).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.signature import command_of


def point_name(point: Mapping[str, int]) -> str:
    return f"{point['partitions']}p x {point['threads']}t, rows {point['max_batch_rows']}"


def decode_label(beams: int | None) -> str:
    return "default" if beams is None else "greedy" if beams == 1 else f"beam{beams}"


def ranked(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: -r["loads"][0]["rps"] if r.get("loads") else 1.0)


def winning_config(result: dict[str, Any]) -> str:
    """The winner as the model-config keys to set in config/zh_en_<variant>.yaml."""
    best = result["winner"]
    if best is None:
        return "# no point served without failures: nothing to recommend\n"
    point = best["point"]
    load = best["loads"][0]
    config = {
        "handler": {
            "step_partitions": point["partitions"],
            "threads": point["threads"],
            "max_batch_rows": point["max_batch_rows"],
        },
    }
    header = (
        f"# bench.studies.layout winner, {result['variant']}: {point_name(point)}: {load['rps']} req/s at "
        f"{result['users']} users ({load['decode']} decode), p50 {load['p50_ms']:.0f} ms, "
        f"p95 {load['p95_ms']:.0f} ms\n# {result['machine']['cpu']}, {result['machine']['cores']} cores, "
        f"{result['date']}{', offline stand-in' if result['standin'] else ''}\n"
    )
    return header + yaml.safe_dump(config, sort_keys=False)


def markdown_table(result: dict[str, Any]) -> str:
    """One row per point, best req/s first (at the first decode); the winner's rank in bold."""
    head = ["#", "partitions", "threads", "rows"]
    for beams in result["decodes"]:
        head += [f"{decode_label(beams)} req/s", "p50 ms", "p95 ms", "failed"]
    head += ["PSS MB, worker + partitions", "USS MB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    best = result["winner"]["point"] if result["winner"] else None
    for rank, row in enumerate(ranked(result["points"]), start=1):
        point = row["point"]
        cells = [f"**{rank}**" if point == best else str(rank)]
        cells += [str(point[key]) for key in ("partitions", "threads", "max_batch_rows")]
        if "error" in row:
            cells += [f"did not serve: {row['error'][:80]}"] + [""] * (len(head) - len(cells) - 1)
        else:
            for load in row["loads"]:
                cells += [
                    str(load["rps"]),
                    f"{load['p50_ms']:.0f}",
                    f"{load['p95_ms']:.0f}",
                    str(load["failures"]),
                ]
            if row.get("workers_died"):
                cells[-1] += f", {row['workers_died']} worker(s) died"
            memory = row["memory_after_runs"]
            cells += [str(memory.get("pss_mb", "-")), str(memory.get("uss_mb", "-"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_markdown(result: dict[str, Any], out: Path, plot: Path | None) -> Path:
    m, decodes = result["machine"], ", ".join(decode_label(b) for b in result["decodes"])
    parts = [
        f"# Step partitions x threads, {result['variant']} ({result['date']})",
        "",
        f"- `{command_of(result)}`: {len(result['points'])} points in {result['elapsed_s'] / 60:.1f} minutes",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['system']}, Python {m['python']}, torch {m['torch']}",
        f"- each point: a fresh TorchServe; {result['users']} Locust users (no wait, on the same host), "
        f"{result['duration']} per decode: {decodes} (default: the model's {result['model_beams']} beams)",
        f"- fixed: `{result['base_config']}` otherwise (maxBatchDelay {result['max_batch_delay_ms']} ms, "
        f"decoder {result['decoder']})",
        "- memory after the runs: PSS of the worker and its partitions summed (shared weights once), USS",
    ]
    if result["standin"]:
        parts.append(
            "- **model: offline stand-in** (random weights, outputs forced to reference lengths): the "
            "timings transfer to the real model, the translations do not"
        )
    parts += ["", markdown_table(result), ""]
    if result["skipped"]:
        parts += ["Left out:", "", *(f"- {line}" for line in result["skipped"]), ""]
    parts += ["Winner, as model-config values:", "", "```yaml", winning_config(result).rstrip(), "```"]
    if plot is not None:
        parts += ["", f"![req/s per layout]({plot.name})"]
    path = out / f"{result['name']}.md"
    path.write_text("\n".join(parts) + "\n")
    return path


def plot(result: dict[str, Any], out: Path) -> Path | None:
    rows = [r for r in ranked(result["points"]) if "error" not in r]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows.reverse()  # best at the top of a horizontal bar chart
    best = result["winner"]["point"] if result["winner"] else None
    figure, axis = plt.subplots(figsize=(8, 1.2 + 0.38 * len(rows)))
    colors = ["#55a868" if r["point"] == best else "#4c72b0" for r in rows]
    values = [r["loads"][0]["rps"] for r in rows]
    axis.barh([point_name(r["point"]) for r in rows], values, color=colors)
    for y, (value, row) in enumerate(zip(values, rows, strict=True)):
        axis.text(
            value, y, f" {value}  (p95 {row['loads'][0]['p95_ms'] / 1000:.1f} s)", va="center", fontsize=8
        )
    axis.set_xlim(0, max(values) * 1.35 or 1)
    load = rows[0]["loads"][0]
    axis.set_xlabel(f"requests/s, {result['users']} users, {load['decode']} decode")
    axis.set_title(f"zh_en {result['variant']}: step partitions x threads (p x t)")
    m = result["machine"]
    footer = f"{m['cpu']}, {m['cores']} cores, {result['date']}"
    if result["standin"]:
        footer += ": offline stand-in (random weights, reference-length outputs)"
    figure.text(0.5, 0.005, footer, ha="center", fontsize=7, color="#555555")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    path = out / f"{result['name']}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
