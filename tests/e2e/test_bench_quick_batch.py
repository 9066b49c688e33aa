"""`make bench-quick`'s mixed and batch steps on the tiny stand-in (the third of it, beside
test_bench_quick.py's quality and latency and test_bench_quick_serving.py's Locust loads, which
`make bench-check` runs side by side): bench.mixed's two admission policies and
bench.batch_throughput's runs (in process and on a real local Ray), each signed, then the report.
Not timed: figures are the bench's job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import batch_throughput, run_all

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check, pytest.mark.long(seconds=145)]  # `make bench-check`


def test_quick_mixed_and_batch_steps_write_results_and_report(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["--quick", "--model", str(tiny_model_dir), "--steps", "mixed", "batch"]
    assert run_all.main([*args, "--results-dir", str(tmp_path)]) == 0
    names = {path.name for path in tmp_path.iterdir()}
    assert {"mixed.json", "batch_throughput.json", "README.md"} <= names
    assert not any(name.startswith(("bleu-", "latency", "load-")) for name in names), names
    assert_mixed_ran(tmp_path)
    assert_batch_ran(tmp_path, tiny_model_dir)
    report = (tmp_path / "README.md").read_text()
    assert "offline stand-in" in report and "## Schedulers" in report and "## Batch prediction" in report


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


def assert_batch_ran(results: Path, model_dir: Path) -> None:
    """bench.batch_throughput: every run translated every sentence, and the result is signed."""
    result = json.loads((results / "batch_throughput.json").read_text())
    assert result["standin"] is True and result["output_lengths"].startswith("reference lengths")
    assert set(result["runs"]) == {"local_per_core", "in_process", "ray_one_actor", "ray_per_core"}
    assert {run["units"] for run in result["runs"].values()} == {batch_throughput.QUICK_SENTENCES}
    assert len({run["sentences"] for run in result["runs"].values()}) == 1
    assert result["shards"] > result["workers_per_core_run"]
    assert result["model_load_seconds"] > 0
    after_load = [run["sentences_per_s_after_load"] for run in result["runs"].values()]
    assert all(rate is None or rate > 0 for rate in after_load)  # a smoke run may be shorter than a load
    assert result["runs"]["local_per_core"]["cpu_busy"] > 0
    # The ratios are the runs' own (the steady-state one only where both outlasted a model load: a smoke
    # run on a loaded host may, as it did in CI beside make fresh-machine; on an idle one it does not).
    assert result["ratios"] == batch_throughput.ratios_of(result["runs"])
    assert {"ray_one_actor_vs_in_process", "ray_per_core_vs_local_per_core"} <= set(result["ratios"])
    command = f"python -m bench.batch_throughput --model {model_dir} --quick --results-dir {results}"
    assert result["signature"]["command"] == command
