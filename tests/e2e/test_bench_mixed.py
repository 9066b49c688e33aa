"""bench.mixed runs both schedulers on real TorchServe with Locust, and writes its JSON, table and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import mixed

pytestmark = pytest.mark.e2e


def test_mixed_measures_both_schedulers_and_reports_the_targets(tiny_model_dir: Path, tmp_path: Path) -> None:
    argv = [
        *("--model", str(tiny_model_dir), "--users", "4", "--document-users", "1"),
        *("--uniform-users", "4", "--duration", "4s", "--beams", "1", "--stream-sentences", "12"),
        *("--results-dir", str(tmp_path)),
    ]
    assert mixed.main(argv) == 0
    result = json.loads((tmp_path / "mixed.json").read_text())
    for name in ("static", "step"):
        figures = result["schedulers"][name]
        assert figures["interactive"]["requests"] > 0 and figures["interactive"]["failures"] == 0
        assert figures["uniform_beam1"]["failures"] == 0
        assert figures["idle"]["document_first_ms"] <= figures["idle"]["document_whole_ms"]
    # step streams the document: a line per sentence (12 or more), then the whole response.
    assert result["schedulers"]["step"]["idle"]["document_lines"] >= 12 + 1
    assert result["schedulers"]["static"]["idle"]["document_lines"] == 1
    assert set(result["targets"]["step_targets"]) >= {
        "p95_at_most_1.5x_alone",
        "documents_no_failures_and_a_third",
    }
    assert (
        "bench.mixed" in (tmp_path / "mixed.md").read_text() and (tmp_path / "mixed.png").stat().st_size > 0
    )
