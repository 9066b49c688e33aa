"""The replica set under load, through the front door: zero failed requests (tiny stand-in).

`make fleet MODEL=tiny` starts the fleet and `make fleet-stop` stops it, as an operator would;
tests.soak.fleet_faults measures the same functions on the full-size archives. Minutes: marked soak.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.processes import process_alive
from serving.replica_set import Fleet
from serving.torchserve import REPO_ROOT
from tests.soak.faults import kill_worker_under_load
from tests.soak.fleet_faults import (
    add_replica_under_load,
    kill_replica_under_load,
    load_key,
    remove_replica_under_load,
    roll_under_load,
    under_load,
)

pytestmark = pytest.mark.soak

QUICK = {"num_beams": 1, "max_new_tokens": 12}
CONCURRENCY = 4
SETTLE = 1.0
# The Makefile's install stamps (its RUNTIME and DEV targets): `make -o` on any other name is a no-op.
VENV_STAMPS = (".venv/.runtime", ".venv/.dev")


def make(*args: str) -> None:
    # -o: the venv running these tests is the one to use; never reinstall it from inside a test.
    keep = [flag for stamp in VENV_STAMPS for flag in ("-o", stamp)]
    subprocess.run(["make", *keep, *args], cwd=REPO_ROOT, check=True, capture_output=True)


def test_make_never_reinstalls_the_venv_under_these_tests() -> None:
    keep = [flag for stamp in VENV_STAMPS for flag in ("-o", stamp)]
    planned = subprocess.run(
        ["make", "-n", "-B", *keep, "fleet", "MODEL=tiny"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert planned.returncode == 0 and "pip install" not in planned.stdout, planned.stdout


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    run_dir = tmp_path_factory.mktemp("fleet")
    # The rate limit is lifted for the load: these tests are about availability (test_fleet.py has 429).
    args = f"--listen 127.0.0.1:{free_port()} --rate 100000 --burst 100000"
    make("fleet", "MODEL=tiny", "REPLICAS=2", f"FLEET_DIR={run_dir}", f"FLEET_ARGS={args}")
    running = Fleet.load(run_dir)
    pids = [running.server(name).java_pid() for name in running.names()]
    try:
        yield running
    finally:
        make("fleet-stop", f"FLEET_DIR={run_dir}")
    assert running.door.master_pid() is None
    assert not any(process_alive(pid) for pid in pids if pid is not None)


@pytest.fixture(scope="module")
def key_file(fleet: Fleet) -> Path:
    return load_key(fleet)


def run(fleet: Fleet, key_file: Path, action: Any, lost_allowed: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = under_load(fleet, key_file, CONCURRENCY, QUICK, SETTLE, action)
    assert result["requests"] > 20, result
    assert result["failed"] <= lost_allowed, result["failure_samples"]
    # A resend answers a request a reload's closed keep-alive connection never delivered: at most
    # one per client connection per reload, never a way to hide a failing replica.
    assert result["resent_unanswered"] <= CONCURRENCY, result
    return result


def test_a_rolling_version_change_fails_no_request(fleet: Fleet, key_file: Path) -> None:
    # One worker per new version keeps this test short on 2 cores; the benchmark rolls with 2.
    result = run(fleet, key_file, lambda: roll_under_load(fleet, targets=("1.0-fp32",), workers=1))
    assert [step["replica"] for step in result["steps"]] == fleet.names()
    assert (result["first_variant"], result["last_variant"]) == ("int8", "fp32")
    assert {fleet.server(name).client.default_version() for name in fleet.names()} == {"1.0-fp32"}


def test_a_replica_killed_with_sigkill_loses_no_request(fleet: Fleet, key_file: Path) -> None:
    """As shipped (torchserve_batching: continuous) a request's 200 head leaves a replica before its
    answer, so a proxied client would keep what the killed replica had sent. The front door reads each
    answer whole before it answers (front_door.answer) and sends a cut one to the live replica
    (docs/SCHEDULING.md, "What a killed worker loses"): no request fails."""
    victim = fleet.names()[0]
    action = lambda: kill_replica_under_load(fleet, victim, down_seconds=2.0)  # noqa: E731
    result = run(fleet, key_file, action)
    assert result["killed_pids"] and not any(process_alive(pid) for pid in result["killed_pids"])
    assert set(result["healthz_while_down"]) == {"200"}, result["healthz_while_down"]
    assert result["retried_on_another_replica"] > 0  # the dead replica's share went elsewhere


def test_one_replica_loses_no_request_when_its_worker_is_killed(tiny_store: Path, tmp_path: Path) -> None:
    """The single-host path as shipped (deploy/zh-en-fleet.service: one replica). SIGKILL its worker
    under load: TorchServe cuts the answers it had begun and answers the rest 507 "Worker died.";
    the front door asks again, the queue holds the requests until the new worker is up, and every
    client gets its translation."""
    door = FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", rate_per_second=100_000, burst=100_000)
    single = Fleet.create(tmp_path / "single", tiny_store, door=door)
    single.start(1)
    try:
        victim = single.server(single.names()[0])
        action = lambda: kill_worker_under_load(victim)  # noqa: E731
        result = run(single, load_key(single), action)
    finally:
        single.stop()
    assert result["killed_pid"] and result["all_ready_after_s"] is not None, result
    assert result["retried_on_another_replica"] > 0, result  # the kill met requests, asked for again


def test_adding_a_replica_and_reloading_nginx_fails_no_request(fleet: Fleet, key_file: Path) -> None:
    added = run(fleet, key_file, lambda: add_replica_under_load(fleet))
    assert added["replica"] in fleet.names() and len(fleet.names()) == 3
    removed = run(fleet, key_file, lambda: remove_replica_under_load(fleet, added["replica"]))
    assert removed["replica"] not in fleet.names() and len(fleet.names()) == 2
