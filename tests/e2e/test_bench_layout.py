"""`python -m bench.studies.layout --quick` end to end on the tiny stand-in: every point is built, served by a
real TorchServe and loaded by Locust; the table, the winner and the files come out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.studies import layout

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check]  # `make bench-check`


def test_quick_layout_sweep_measures_every_point_and_names_a_winner(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert layout.main(["--quick", "--model", str(tiny_model_dir), "--results-dir", str(tmp_path)]) == 0

    result = json.loads((tmp_path / "layout-quick.json").read_text())
    points = [row["point"] for row in result["points"]]
    assert points == [
        {"partitions": 1, "threads": 1, "max_batch_rows": 8},
        {"partitions": 1, "threads": 1, "max_batch_rows": 32},
    ]
    for row in result["points"]:
        assert "error" not in row and row["ready_workers"] == 1
        (load,) = row["loads"]
        assert load["requests"] > 0 and load["failures"] == 0 and load["standin"] is True
        # the worker and its one partition, the model's weights shared between them
        assert row["memory_after_runs"]["processes"] >= 2 and row["memory_after_runs"]["pss_mb"] > 0
    assert result["winner"]["point"] in points
    assert result["machine"]["cpu"] and result["date"] and result["standin"] is True

    stdout = capsys.readouterr().out
    snippet = yaml.safe_load(stdout.split("config/zh_en_int8.yaml):", 1)[1])
    best = result["winner"]["point"]
    assert snippet["handler"] == {
        "step_partitions": best["partitions"],
        "threads": best["threads"],
        "max_batch_rows": best["max_batch_rows"],
    }

    report = (tmp_path / "layout-quick.md").read_text()
    assert "| **1** |" in report and "offline stand-in" in report and result["machine"]["cpu"] in report
    assert (tmp_path / "layout-quick.png").stat().st_size > 0
