"""`make bench-quick` on the tiny stand-in, in three parts that `make bench-check` runs side by
side (the whole took 326 s as one test at 7f45fa2; the serving part alone 350 s at b6d611a): each
runs its steps of `python -m bench.run_all --quick`, then the report, and the results, report and
plots appear. This module: the quality and latency steps (the quick ladder forks its rungs,
bench.latency.rung_processes); test_bench_quick_serving.py: the Locust loads;
test_bench_quick_batch.py: bench.mixed and the batch job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_all
from tests.unit.test_latency import assert_quick_ladder

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check, pytest.mark.long(seconds=127)]  # `make bench-check`


def test_quick_quality_and_latency_steps_write_results_report_and_plot(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ["--quick", "--model", str(tiny_model_dir), "--steps", "quality", "latency"]
    assert run_all.main([*args, "--results-dir", str(tmp_path)]) == 0
    names = {path.name for path in tmp_path.iterdir()}
    assert {"bleu-published.json", "bleu-standin-int8.json", "latency.json", "latency_by_rung.png"} <= names
    assert not any(name.startswith(("load-", "mixed", "batch_throughput")) for name in names), names
    latency = json.loads((tmp_path / "latency.json").read_text())["signature"]["command"]
    assert latency.startswith(f"python -m bench.latency --model {tiny_model_dir} --quick")
    assert_quick_ladder(tmp_path, tiny_model_dir)
    report = (tmp_path / "README.md").read_text()
    assert "offline stand-in" in report and "| 36.12 | 54.81 |" in report
