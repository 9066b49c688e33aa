"""bench.batch_throughput's smoke run on the tiny stand-in: every run translates every sentence, in
process and on a real local Ray, and the result is signed (not timed: figures are the bench's job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import batch_throughput

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check]  # `make bench-check`


def test_quick_batch_throughput_runs_every_engine(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["--quick", "--model", str(tiny_model_dir), "--results-dir", str(tmp_path)]
    assert batch_throughput.main(args) == 0
    result = json.loads((tmp_path / "batch_throughput.json").read_text())
    assert result["standin"] is True and result["output_lengths"].startswith("reference lengths")
    assert set(result["runs"]) == {"in_process", "ray_one_actor", "ray_per_core"}
    assert {run["sentences"] for run in result["runs"].values()} == {batch_throughput.QUICK_SENTENCES}
    assert result["shards"] > 1 and set(result["ratios"]) == {
        "ray_one_actor_vs_in_process",
        "ray_per_core_vs_in_process",
    }
    assert result["signature"]["command"] == f"python -m bench.batch_throughput {' '.join(args)}"
