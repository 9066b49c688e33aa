"""Start and stop a real TorchServe from the production config, on chosen (or free) local ports.

Used by the end-to-end tests and the benchmarks. Each instance gets its own
working directory (key_file.json, logs) and its own TMPDIR, because
`torchserve --stop` finds the server through a pid file in the temp dir.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from serving.client import Endpoints, TorchServeClient

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_CONFIG = REPO_ROOT / "config" / "config.properties"


def is_backend_worker(pid: int) -> bool:
    """A live TorchServe Python worker process (not a zombie, not another child of the frontend)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z" and "model_service_worker" in cmdline


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Ports:
    inference: int
    management: int
    metrics: int
    grpc_inference: int
    grpc_management: int

    @classmethod
    def free(cls) -> Ports:
        return cls(*(free_port() for _ in range(5)))


def render_config(
    base: Path,
    ports: Ports,
    model_store: Path,
    overrides: Mapping[str, str] | None = None,
    inference_host: str = "127.0.0.1",
) -> str:
    """The base config with ports, model store and overrides replaced; every other line kept as is.

    Management, metrics and gRPC keep the base config's bind addresses (only their ports change), so
    a server started from here listens where production would; inference binds `inference_host`.
    """
    text = base.read_text()
    current = dict(re.findall(r"^([A-Za-z_.]+)=(.*)$", text, flags=re.MULTILINE))

    def with_port(key: str, port: int) -> str:
        return re.sub(r":\d+$", f":{port}", current[key])

    values = {
        "inference_address": f"http://{inference_host}:{ports.inference}",
        "management_address": with_port("management_address", ports.management),
        "metrics_address": with_port("metrics_address", ports.metrics),
        "grpc_inference_port": str(ports.grpc_inference),
        "grpc_management_port": str(ports.grpc_management),
        "model_store": str(model_store),
        # Relative to the repository (where `make serve` starts); the rendered config lives elsewhere.
        **(
            {"metrics_config": str(REPO_ROOT / current["metrics_config"])}
            if "metrics_config" in current
            else {}
        ),
        **(overrides or {}),
    }
    lines, seen = [], set()
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_.]+)=", line)
        if match and match.group(1) in values:
            key = match.group(1)
            line = f"{key}={values[key]}"
            seen.add(key)
        lines.append(line)
    lines += [f"{key}={value}" for key, value in values.items() if key not in seen]
    return "\n".join(lines) + "\n"


class TorchServe:
    """One TorchServe process tree; `with TorchServe(...) as server:` starts and always stops it."""

    def __init__(
        self,
        model_store: Path,
        workdir: Path,
        models: Sequence[str] = ("zh_en_int8.mar",),
        ports: Ports | None = None,
        overrides: Mapping[str, str] | None = None,
        base_config: Path = PRODUCTION_CONFIG,
    ) -> None:
        self.model_store = model_store.resolve()
        self.workdir = workdir.resolve()
        self.models = list(models)
        self.ports = ports or Ports.free()
        self.config_path = self.workdir / "config.properties"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render_config(base_config, self.ports, self.model_store, overrides))
        self.tmpdir = self.workdir / "tmp"
        self.tmpdir.mkdir(exist_ok=True)
        endpoints = Endpoints(
            inference=f"http://127.0.0.1:{self.ports.inference}",
            management=f"http://127.0.0.1:{self.ports.management}",
            metrics=f"http://127.0.0.1:{self.ports.metrics}",
        )
        self.key_file = self.workdir / "key_file.json"
        self.client = TorchServeClient(endpoints, self.key_file)

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "TMPDIR": str(self.tmpdir),
            "LOG_LOCATION": str(self.workdir / "logs"),
            "METRICS_LOCATION": str(self.workdir / "logs"),
        }
        env.pop("TS_CONFIG_FILE", None)  # it would override --ts-config
        return env

    def command(self, *args: str) -> list[str]:
        binary = shutil.which("torchserve", path=str(Path(sys.executable).parent)) or "torchserve"
        return [binary, *args]

    def start(self, timeout: float = 300.0) -> None:
        args = [
            "--start",
            "--ncs",
            "--model-store",
            str(self.model_store),
            "--ts-config",
            str(self.config_path),
        ]
        if self.models:
            args += ["--models", *self.models]
        subprocess.run(
            self.command(*args),
            cwd=self.workdir,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_healthy(timeout)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.key_file.exists() or not self._token_auth_on():
                    response = self.client.ping()
                    if response.status_code == 200 and response.json().get("status") == "Healthy":
                        return
            except (requests.ConnectionError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"TorchServe not healthy after {timeout:.0f}s; logs in {self.workdir / 'logs'}")

    def _token_auth_on(self) -> bool:
        return "disable_token_authorization=true" not in self.config_path.read_text()

    def java_pid(self) -> int | None:
        pid_file = self.tmpdir / ".model_server.pid"
        return int(pid_file.read_text().strip()) if pid_file.exists() else None

    def worker_pids(self) -> list[int]:
        """PIDs of this server's live Python backend workers (children of the Java frontend).

        Other children (a worker being replaced that has not been reaped yet, a zombie) are left out.
        """
        java = self.java_pid()
        if java is None:
            return []
        out = subprocess.run(["pgrep", "-P", str(java)], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split() if is_backend_worker(int(pid))]

    def stop(self, timeout: float = 60.0) -> None:
        java, workers = self.java_pid(), self.worker_pids()
        subprocess.run(
            self.command("--stop"),
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        deadline = time.monotonic() + timeout
        pids = [pid for pid in [java, *workers] if pid is not None]
        while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in pids:  # a clean stop leaves nothing; this only guards against a wedged server
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> TorchServe:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours still answers kill(0); it is gone for our purposes.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(") ")[-1].startswith(("R", "S", "D"))
