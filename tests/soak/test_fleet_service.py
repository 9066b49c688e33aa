"""The single-host production path: `serving.fleet run` (deploy/zh-en-fleet.service) in the foreground.

A SIGTERM with requests in flight fails none of them; a restart keeps the client keys; a killed
replica comes back by itself.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from libretranslatepy import LibreTranslateAPI

from serving.ports import free_port
from serving.processes import process_alive
from serving.replica_set import Fleet
from tests.e2e.stopping_clients import Clients
from tests.waiting import wait_until

# A fault drill: `make soak` (and CI), not `make test`; seconds: the longest start first.
pytestmark = [pytest.mark.e2e, pytest.mark.soak, pytest.mark.long(seconds=50)]


@dataclass
class Service:
    """`python -m serving.fleet run` as a service manager would start it."""

    store: Path
    run_dir: Path
    listen: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.listen}"

    def start(self) -> None:
        command = [
            sys.executable, "-m", "serving.fleet", "run", "--replicas", "1",
            "--dir", str(self.run_dir), "--model-store", str(self.store),
            "--listen", self.listen, "--rate", "1000", "--burst", "1000",
        ]  # fmt: skip
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with (self.run_dir / "service.log").open("a") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        self.wait_healthy(300)

    def wait_healthy(self, timeout: float) -> None:
        def healthy() -> bool:
            assert self.process is not None and self.process.poll() is None, self.log()
            try:
                return requests.get(f"{self.url}/healthz", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_until(healthy, timeout, self.log, 0.5)

    def wait_logged(self, line: str, timeout: float) -> None:
        wait_until(lambda: line in self.log(), timeout, lambda: f"no {line!r}:\n{self.log()}", 0.1)

    def terminate(self, timeout: float = 90) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def log(self) -> str:
        return (self.run_dir / "service.log").read_text(errors="replace")[-3000:]

    def kill_everything(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if (self.run_dir / "fleet.json").exists():
            Fleet.load(self.run_dir).stop(drain_seconds=5)


def translate(service: Service, key: str) -> requests.Response:
    return requests.post(
        f"{service.url}/predictions/zh_en",
        json={"text": "你好。"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def test_the_service_drains_on_sigterm_keeps_its_keys_and_revives_a_replica(
    tiny_store: Path, tmp_path: Path
) -> None:
    service = Service(tiny_store, tmp_path / "fleet", f"127.0.0.1:{free_port()}")
    try:
        service.start()
        key = json.loads((service.run_dir / "client_key.json").read_text())["inference"]["key"]
        assert translate(service, key).status_code == 200

        clients = Clients(f"{service.url}/predictions/zh_en", key, resend_unanswered=True)
        threads = clients.run(4)
        clients.wait_answered(4)  # every client is sending its next request
        replica = Fleet.load(service.run_dir).server("r1")
        pids = [replica.java_pid(), *replica.worker_pids()]
        # The load balancer stops sending first (a host taken out of its pool); nginx refuses new
        # connections once it quits, and that is not a request lost.
        clients.stop_sending.set()
        terminated = time.monotonic()
        service.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for thread in threads:
            thread.join(60)
        assert service.process.wait(90) == 0, service.log()  # type: ignore[union-attr]
        in_flight, failed = clients.in_flight_at(terminated), clients.failed()
        assert in_flight, "no request was in flight at SIGTERM: the test proves nothing"
        assert not failed, (failed[:3], service.log())
        assert clients.resent <= 4  # at most one per client, at the quit
        assert not [pid for pid in pids if pid and process_alive(pid)]

        # Started again from the same directory: the same key works; nothing new was minted.
        (service.run_dir / "client_key.json").unlink()
        service.start()
        assert not (service.run_dir / "client_key.json").exists()
        assert translate(service, key).status_code == 200
        # The production path serves LibreTranslate's clients too (deploy/nginx/libretranslate.conf).
        assert isinstance(LibreTranslateAPI(service.url, api_key=key).translate("你好。", "zh", "en"), str)

        # A replica that dies is started again by the service, and the front door serves again.
        killed = Fleet.load(service.run_dir).kill_replica("r1")
        assert killed
        service.wait_logged("replica r1 is down", 30)  # the supervisor polls every 2 s
        service.wait_healthy(300)
        assert translate(service, key).status_code == 200
        # It logs this after its reload, which can come after /healthz is 200.
        service.wait_logged("replica r1 is back", 60)
        assert service.terminate() == 0, service.log()
        print(
            f"{len(clients.outcomes)} requests, {len(in_flight)} in flight at SIGTERM, 0 failed, "
            f"{clients.resent} resent; "
            f"{service.log().strip().splitlines()[-1]}"
        )
    finally:
        service.kill_everything()
