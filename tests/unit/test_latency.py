"""Latency ladder: the naive baseline really pads, dynamic shapes never do, a quick run reports every rung."""

from __future__ import annotations

import json
from pathlib import Path

from bench import latency
from handlers.translator import pad_batch


def test_fixed_padding_pads_every_row_to_128_and_dynamic_never_pads_one_sentence() -> None:
    ids = [[5, 6, 7], [8]]
    fixed, mask = latency.pad_to_fixed(ids, 128, pad_id=0)
    assert fixed.shape == (2, 128) and mask.sum().item() == 4
    single, single_mask = pad_batch([[5, 6, 7]], pad_id=0)
    assert single.shape == (1, 3) and bool(single_mask.all())


def test_quick_ladder_on_the_tiny_standin(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--quick", "--results-dir", str(tmp_path)]
    assert latency.main(args) == 0
    result = json.loads((tmp_path / "latency.json").read_text())
    rungs = result["ladders"]["1"]["rungs"]
    assert [row["rung"] for row in rungs] == [1, 2, 3, 4]
    assert all(row["p50_ms"] > 0 and row["sentences_per_s"] > 0 and row["rss_mb"] > 0 for row in rungs)
    assert result["standin"] is True and result["output_lengths"].startswith("reference lengths")
    assert {target["target"] for target in result["ladders"]["1"]["targets"]} >= {
        "int8 dynamic p50 <= 1/3 of fp32 dynamic p50"
    }
