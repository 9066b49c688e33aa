"""bench.load drives real Locust against a real server: requests flow, none fail, CSV and JSON are kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.load import LoadSpec, run_load
from serving.torchserve import TorchServe

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check]  # `make bench-check`


def test_locust_load_against_the_server(server: TorchServe, tiny_model_dir: Path, tmp_path: Path) -> None:
    spec = LoadSpec(
        server.client.endpoints.inference,
        users=4,
        spawn_rate=4,
        duration="6s",
        num_beams=1,
        key_file=server.key_file,
        label="load-smoke",
        sentences=50,
    )
    summary = run_load(spec, tmp_path, tiny_model_dir)
    assert summary["requests"] > 0 and summary["failures"] == 0
    assert summary["standin"] is True and summary["variant"] == "int8"
    written = json.loads((tmp_path / "load-smoke.json").read_text())
    assert written["rps"] == summary["rps"] and (tmp_path / "load-smoke_stats.csv").exists()
