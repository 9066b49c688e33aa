"""SIGTERM to serving.graceful (the image's PID 1): unhealthy at once, requests in flight end, then a stop."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving import health
from serving.client import read_key
from serving.processes import live_children, process_alive
from serving.swap import archive_workers
from serving.torchserve import TorchServe
from tests.e2e.stopping_clients import Clients
from tests.waiting import wait_until

# A fault drill with wall-clock bounds: `make soak` runs it, one test at a time (not `make test`).
pytestmark = [pytest.mark.e2e, pytest.mark.soak, pytest.mark.timed]


def start_supervised(
    server: TorchServe, drain_seconds: float, state_dir: Path | None = None
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "serving.graceful",
        "--drain-seconds", str(drain_seconds),
        "--management", server.client.endpoints.management,
        "--", *server.command(*server.start_args(), "--foreground"),
    ]  # fmt: skip
    # A file, not a pipe: TorchServe inherits it and would block on a full pipe nobody reads.
    with (server.workdir / "supervisor.log").open("w") as log:
        env = {**server.env, **({"ZH_EN_STATE_DIR": str(state_dir)} if state_dir else {})}
        supervisor = subprocess.Popen(command, cwd=server.workdir, env=env, stdout=log, stderr=log)
    server.wait_healthy(300)
    workers = archive_workers(server.model_store / server.models[0])  # as its model config starts it
    server.client.wait_ready(server.client.default_version(), workers)  # /ping may come first
    return supervisor


def test_sigterm_finishes_requests_in_flight_then_stops(tiny_store: Path, tmp_path: Path) -> None:
    server = TorchServe(tiny_store, tmp_path / "ts")
    state = tmp_path / "state"  # the service's own directory (ZH_EN_STATE_DIR), never /tmp
    supervisor = start_supervised(server, drain_seconds=30, state_dir=state)
    try:
        java, workers = server.java_pid(), server.worker_pids()
        partitions = [child for worker in workers for child in live_children(worker)]  # under step
        key = read_key(server.key_file, "inference")
        clients = Clients(f"{server.client.endpoints.inference}/predictions/zh_en", key)
        threads = clients.run(6)
        clients.wait_answered(6)  # every client is sending its next request
        terminated = time.monotonic()
        supervisor.send_signal(signal.SIGTERM)
        marker = state / "zh_en.draining"
        wait_until(marker.exists, 10, "the drain marker after SIGTERM")
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert not (server.tmpdir / "zh_en.draining").exists()
        assert health.main(["--key-file", str(server.key_file), "--marker", str(marker)]) == 1
        clients.stop_sending.set()  # the load balancer has seen the health check fail
        for thread in threads:
            thread.join(timeout=60)
        assert supervisor.wait(timeout=60) is not None
        stopped = time.monotonic()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            server.stop()
    lines = (server.workdir / "supervisor.log").read_text().splitlines()
    log = "\n".join(line for line in lines if "serving.graceful" in line)
    in_flight, failed = clients.in_flight_at(terminated), clients.failed()
    assert in_flight, "no request was in flight at SIGTERM: the test proves nothing"
    assert not failed, f"{len(failed)} of {len(clients.outcomes)} failed: {failed[:3]}\n{log}"
    assert "drained after" in log, log
    assert stopped - max(o.ended for o in clients.outcomes) < 20, log
    assert not [pid for pid in [java, *workers, *partitions] if pid is not None and process_alive(pid)]
    print(
        f"{len(clients.outcomes)} requests, {len(in_flight)} in flight at SIGTERM, 0 failed; "
        f"stopped {stopped - terminated:.1f} s after SIGTERM; {log.strip().splitlines()[-1]}"
    )


def test_an_idle_server_stops_within_seconds(tiny_store: Path, tmp_path: Path) -> None:
    server = TorchServe(tiny_store, tmp_path / "ts")
    supervisor = start_supervised(server, drain_seconds=30)
    java = server.java_pid()
    terminated = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    try:
        supervisor.wait(timeout=60)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            server.stop()
    assert time.monotonic() - terminated < 15
    assert java is not None and not process_alive(java)
