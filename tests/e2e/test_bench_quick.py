"""`make bench-quick` end to end on the tiny stand-in: every step runs, the report and plots appear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_all
from tests.unit.test_latency import assert_quick_ladder

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check]  # `make bench-check`


def test_quick_bench_writes_results_report_and_plots(tiny_model_dir: Path, tmp_path: Path) -> None:
    # Every server in the run packs its own cache-off archive from --model.
    args = ["--quick", "--model", str(tiny_model_dir)]
    assert run_all.main([*args, "--results-dir", str(tmp_path)]) == 0
    names = {path.name for path in tmp_path.iterdir()}
    assert {"bleu-published.json", "bleu-standin-int8.json", "latency.json", "README.md"} <= names
    assert {
        "load-int8-greedy-u4.json",
        "load-fp32-greedy-u4.json",
        "load-int8-generate-greedy-u4.json",
    } <= names
    assert {"latency_by_rung.png", "fp32_vs_int8.png", "mixed.json", "batch_throughput.json"} <= names
    for server, variant, decoder in (
        ("int8", "int8", "fast"),
        ("fp32", "fp32", "fast"),
        ("int8-generate", "int8", "generate"),
    ):
        load = json.loads((tmp_path / f"load-{server}-greedy-u4.json").read_text())
        assert load["requests"] > 0 and load["failures"] == 0
        assert (load["variant"], load["decoder"]) == (variant, decoder)
        # Locust runs are signed with the run that started them; every other step with its own line.
        assert (
            load["signature"]["command"]
            == f"python -m bench.run_all {' '.join(args)} --results-dir {tmp_path}"
        )
    latency = json.loads((tmp_path / "latency.json").read_text())["signature"]["command"]
    assert latency.startswith(f"python -m bench.latency --model {tiny_model_dir} --quick")
    assert_quick_ladder(tmp_path, tiny_model_dir)
    assert_mixed_ran(tmp_path)
    report = (tmp_path / "README.md").read_text()
    assert "offline stand-in" in report and "| 36.12 | 54.81 |" in report


def assert_mixed_ran(results: Path) -> None:
    """bench.mixed: both policies under Locust, the streamed document, the targets, table and plot."""
    result = json.loads((results / "mixed.json").read_text())
    for name in ("static", "step"):
        figures = result["schedulers"][name]
        assert figures["interactive"]["requests"] > 0 and figures["interactive"]["failures"] == 0
        assert figures["uniform_beam1"]["failures"] == 0
        assert figures["idle"]["document_first_ms"] <= figures["idle"]["document_whole_ms"]
    # step streams the document: a line per sentence (12 or more), then the whole response.
    assert result["schedulers"]["step"]["idle"]["document_lines"] >= 12 + 1
    assert result["schedulers"]["static"]["idle"]["document_lines"] == 1
    assert {
        "paced_p95_beside_documents_at_most_1.5x_alone",
        "interactive_rps_held",
        "documents_complete_without_failures",
        "serving_overhead_at_most_10ms",
        "uniform_beam1_at_least_1.0x_static_no_failures",
    } == set(result["targets"]["step_targets"])  # issue 26's, at the quick run's one beam count
    assert result["in_process_one_sentence_ms"] > 0
    assert {"serving_overhead_ms"} <= set(result["targets"]["step"]) & set(result["targets"]["static"])
    assert "bench.mixed" in (results / "mixed.md").read_text() and (results / "mixed.png").stat().st_size > 0
