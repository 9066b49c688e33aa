"""`make bench-quick`'s Locust loads on the tiny stand-in (test_bench_quick.py says why the run is cut
in parts; test_bench_quick_batch.py has the mixed and batch steps): our three servers under load,
each run signed, then the report and its plot. Not timed: figures are the bench's job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_all

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check, pytest.mark.long(seconds=80)]  # `make bench-check`


def test_quick_load_steps_write_results_report_and_plot(tiny_model_dir: Path, tmp_path: Path) -> None:
    # Every server in the run packs its own cache-off archive from --model.
    args = ["--quick", "--model", str(tiny_model_dir), "--steps", "load"]
    assert run_all.main([*args, "--results-dir", str(tmp_path)]) == 0
    names = {path.name for path in tmp_path.iterdir()}
    assert {
        "load-int8-greedy-u4.json",
        "load-fp32-greedy-u4.json",
        "load-int8-generate-greedy-u4.json",
        "README.md",
    } <= names
    assert "fp32_vs_int8.png" in names
    assert not any(name.startswith(("bleu-", "latency", "mixed", "batch_")) for name in names), names
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
    report = (tmp_path / "README.md").read_text()
    assert "offline stand-in" in report and "## Load (Locust" in report
    assert "![fp32_vs_int8](fp32_vs_int8.png)" in report
