"""The latency ladder judged and shown: serving overhead, ratios to the peer and to generate(),
the issues' targets (met or missed, by how much), and the markdown tables.

Works on the rows bench.latency measured (or latency.json read back), by rung number.
"""

from __future__ import annotations

from typing import Any


def http_overhead_ms(rows: list[dict[str, Any]]) -> float | None:
    """Serving overhead: HTTP p50 minus in-process int8 dynamic p50 (None without rung 5)."""
    by = {row["rung"]: row for row in rows}
    return round(by[5]["p50_ms"] - by[3]["p50_ms"], 2) if 5 in by else None


def peer_ratios(rows: list[dict[str, Any]]) -> dict[str, float] | None:
    """Ours / CTranslate2: int8 one-sentence p50 (<= 1: ours at least as fast) and batch sentences/s
    (>= 1: ours at least as fast), without its vocabulary map and (`_vmap`) with it; None without
    the peer rungs."""
    by = {row["rung"]: row for row in rows}
    if 6 not in by or 7 not in by:
        return None
    ratios = {
        "single_p50": round(by[3]["p50_ms"] / by[6]["p50_ms"], 3),
        "batch_sentences_per_s": round(by[4]["sentences_per_s"] / by[7]["sentences_per_s"], 3),
    }
    if 11 in by and 12 in by:
        ratios["single_p50_vmap"] = round(by[3]["p50_ms"] / by[11]["p50_ms"], 3)
        ratios["batch_sentences_per_s_vmap"] = round(by[4]["sentences_per_s"] / by[12]["sentences_per_s"], 3)
        if 13 in by and 14 in by:  # the opt-in oneDNN kernels against the same peer
            ratios["single_p50_vmap_onednn"] = round(by[13]["p50_ms"] / by[11]["p50_ms"], 3)
            ratios["batch_sentences_per_s_vmap_onednn"] = round(
                by[14]["sentences_per_s"] / by[12]["sentences_per_s"], 3
            )
    return ratios


def targets(rows: list[dict[str, Any]], beams: int, batch: int) -> list[dict[str, Any]]:
    """The issues' targets, computed from one ladder: met or missed, and by how much."""
    by = {row["rung"]: row for row in rows}
    fp32_total = by[2]["run_private_mb"] + by[2]["run_file_mb"] if "run_private_mb" in by[2] else None
    checks = [
        ("int8 dynamic p50 <= 1/3 of fp32 dynamic p50", by[3]["p50_ms"] / by[2]["p50_ms"], 1 / 3, "max"),
        ("rung 3 >= 4x faster than rung 1 (p50)", by[1]["p50_ms"] / by[3]["p50_ms"], 4.0, "min"),
        (
            "fast decoder one sentence >= 1.3x faster than generate() (p50)",
            by[8]["p50_ms"] / by[3]["p50_ms"],
            1.3,
            "min",
        ),
    ]
    if beams > 1:
        checks.append(
            (
                f"beam {beams}: batches of {batch} (own lengths) >= 2x one sentence (sentences/s)",
                by[10]["sentences_per_s"] / by[3]["sentences_per_s"],
                2.0,
                "min",
            )
        )
    if fp32_total:
        checks.append(
            (
                "int8 private <= 60% of fp32 private + file-backed (after the run)",
                by[3]["run_private_mb"] / fp32_total,
                0.60,
                "max",
            )
        )
    if (overhead := http_overhead_ms(rows)) is not None:
        checks.append(("HTTP serving overhead p50 <= 5 ms", overhead, 5.0, "max"))
    if (ratios := peer_ratios(rows)) is not None:
        checks += [
            ("our int8 single-sentence p50 <= CTranslate2's", ratios["single_p50"], 1.0, "max"),
            (
                f"our int8 batch-{batch} sentences/s >= CTranslate2's",
                ratios["batch_sentences_per_s"],
                1.0,
                "min",
            ),
        ]
        if "single_p50_vmap" in ratios:
            checks += [
                (
                    "our int8 single-sentence p50 <= CTranslate2 + map's",
                    ratios["single_p50_vmap"],
                    1.0,
                    "max",
                ),
                (
                    f"our int8 batch-{batch} sentences/s >= CTranslate2 + map's",
                    ratios["batch_sentences_per_s_vmap"],
                    1.0,
                    "min",
                ),
            ]
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
    """The ladders as markdown tables, targets under each, then the notes."""
    lines, batch = [], result.get("batch", "?")  # latency.json before the key: unknown
    for beams, ladder in result["ladders"].items():
        lines += [
            f"\n**{'greedy' if beams == '1' else f'beam {beams}'}** ({result['n']} sentences, 1 thread)\n",
            "| rung | p50 ms | p95 ms | p99 ms | sent/s | RSS MB after load (private + file) | peak RSS MB "
            "| speedup p50 | speedup sent/s |",
            "|---|---|---|---|---|---|---|---|---|",
            *(_row(row) for row in ladder["rungs"]),
        ]
        if ladder.get("http_overhead_p50_ms") is not None:
            lines.append(f"\nServing overhead (rung 5 p50 - rung 3 p50): {ladder['http_overhead_p50_ms']} ms")
        if (ratios := ladder.get("peer_ratios")) is not None:
            lines.append(
                f"\nOurs / {result['peer']['engine']} ({result['peer']['note']}): one-sentence p50 "
                f"{ratios['single_p50']} (rung 3 / rung 6, <= 1 is ours faster), batch-{batch} sentences/s "
                f"{ratios['batch_sentences_per_s']} (rung 4 / rung 7, >= 1 is ours faster)"
            )
            if "single_p50_vmap" in ratios:
                lines.append(
                    f"\nOurs / the same with its target-side vocabulary map: one-sentence p50 "
                    f"{ratios['single_p50_vmap']} (rung 3 / rung 11), batch-{batch} sentences/s "
                    f"{ratios['batch_sentences_per_s_vmap']} (rung 4 / rung 12)"
                )
            if "single_p50_vmap_onednn" in ratios:
                lines.append(
                    f"\nWith the opt-in oneDNN int8 kernels (int8_kernels: onednn), against the same: "
                    f"one-sentence p50 {ratios['single_p50_vmap_onednn']} (rung 13 / rung 11), batch-{batch} "
                    f"sentences/s {ratios['batch_sentences_per_s_vmap_onednn']} (rung 14 / rung 12)"
                )
        by = {row["rung"]: row for row in ladder["rungs"]}
        if 8 in by and 9 in by:
            single = by[8]["p50_ms"] / by[3]["p50_ms"]
            batched = by[4]["sentences_per_s"] / by[9]["sentences_per_s"]
            lines.append(
                f"\nFast decoder vs generate() (int8; target-side output layer of "
                f"{by[3].get('target_vocabulary', '?')} rows): one sentence {single:.2f}x faster "
                f"(rung 8 p50 / rung 3 p50), batches of {batch} {batched:.2f}x (rung 4 / rung 9 sentences/s)"
            )
        lines += memory_table(by, batch)
        lines += ["", "| target | measured | limit | met |", "|---|---|---|---|"]
        lines += [
            f"| {t['target']} | {t['measured']} | {t['limit']} | {'yes' if t['met'] else 'NO'} |"
            for t in ladder["targets"]
        ]
    lines += ["", *(f"- {note}" for note in result.get("notes", []))]
    return "\n".join(lines)


# Whose memory the table compares: int8 and CTranslate2 after their batch rungs, fp32 after its
# dynamic one-sentence rung (the ladder has no fp32 batch rung).
MEMORY_RUNGS = ((4, "ours int8"), (2, "ours fp32"), (12, "CTranslate2 int8 + map"), (7, "CTranslate2 int8"))


def memory_table(by_rung: dict[int, dict[str, Any]], batch: object) -> list[str]:
    """Private and file-backed MB per process after its timed run, and a two-worker host's total.

    Two workers of one model share its weight file's pages (file-backed, counted once) and each
    holds its own private memory: host total = 2 x private + file.
    """
    rows = [
        (label, by_rung[rung])
        for rung, label in MEMORY_RUNGS
        if rung in by_rung and "run_private_mb" in by_rung[rung]
    ]
    if not rows:
        return []
    lines = [
        f"\nMemory after the timed run (int8 and CTranslate2: batches of {batch}; fp32: one sentence at "
        "a time). Every process includes the same Python, torch and transformers harness:\n",
        "| engine (rung) | private MB | file-backed MB | total MB | two workers on one host MB |",
        "|---|---|---|---|---|",
    ]
    for label, row in rows:
        private, file = row["run_private_mb"], row["run_file_mb"]
        lines.append(
            f"| {label} ({row['rung']}) | {private} | {file} | {private + file} | {2 * private + file} |"
        )
    return lines


def _row(row: dict[str, Any]) -> str:
    return (
        f"| {row['rung']}. {row['name']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['p99_ms']:.1f} "
        f"| {row['sentences_per_s']} | {_memory(row)} | {row['peak_rss_mb'] or '-'} "
        f"| {row['speedup_p50'] or '-'} | {row['speedup_throughput']} |"
    )


def _memory(row: dict[str, Any]) -> str:
    if "private_mb" not in row:
        return str(row.get("rss_mb", "-"))
    return f"{row['rss_mb']} ({row['private_mb']} + {row['file_mb']})"
