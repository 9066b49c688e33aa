"""bench.load drives real Locust against a real server: requests flow, none fail, CSV and JSON are kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cpu_account import LOAD_GENERATOR, torchserve_roles
from bench.load import LoadSpec, run_load
from serving.torchserve import TorchServe

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check]  # `make bench-check`


def test_locust_load_against_the_server(server: TorchServe, tiny_model_dir: Path, tmp_path: Path) -> None:
    spec = LoadSpec(
        server.client.endpoints.inference,
        users=4,
        spawn_rate=4,
        duration="16s",  # the CPU account's window: from 5 s in to 1 s before the end
        num_beams=1,
        key_file=server.key_file,
        label="load-smoke",
        sentences=50,
    )
    summary = run_load(spec, tmp_path, tiny_model_dir, cpu_roles=lambda: torchserve_roles(server))
    assert summary["requests"] > 0 and summary["failures"] == 0
    assert summary["standin"] is True and summary["variant"] == "int8"
    written = json.loads((tmp_path / "load-smoke.json").read_text())
    assert written["rps"] == summary["rps"] and (tmp_path / "load-smoke_stats.csv").exists()
    # Over the run's middle: Locust's own count gives the rate, each kind of process its CPU.
    cpu = summary["cpu"]
    assert 0.5 < cpu["requests_per_s"] / summary["rps"] < 2  # Locust's marks and its whole run agree
    assert cpu["seconds"] == pytest.approx(10, abs=1.5)
    # The tiny model decodes in a few ms, in a partition or in the handler worker itself (a role
    # may then round to 0.0 ms a request): the serving processes together are charged for it.
    roles = ("frontend (Java)", "handler workers", "partitions")
    serving = sum(cpu["ms_per_request"][role] for role in roles)
    assert serving > 0 and cpu["ms_per_request"][LOAD_GENERATOR] > 0, cpu
    assert cpu["cpu_seconds"]["frontend (Java)"] > 0 and cpu["ended_during_window"] == 0
