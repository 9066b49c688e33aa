"""Start and stop a real TorchServe from the production config, on chosen (or free) local ports.

Used by the end-to-end tests, the benchmarks and the replica set. Each instance gets its own
working directory (key_file.json, logs), its own TMPDIR (`torchserve --stop` finds the server
through a pid file there) and its own java.io.tmpdir (where the workers' unix sockets live and
archives are unpacked), so several servers can run side by side on one host. Both directories are
private (0700) and removed on stop. A base config whose management_address is `unix:` (a fleet
replica's) gets its management API as a unix socket in the private socket directory: only this
user can reach it. Ports come from serving.ports; the worker processes are watched through
serving.processes. Every `torchserve --start/--stop` runs under a timeout: a launcher that hangs
fails the call instead of blocking it for good.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from serving.client import Endpoints, TorchServeClient
from serving.ports import Ports
from serving.processes import command_line, process_alive, process_state, wait_gone
from serving.unix_http import unix_url

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_CONFIG = REPO_ROOT / "config" / "config.properties"
MANAGEMENT_SOCKET = "management.sock"
# A unix socket's address holds at most 107 bytes of path; the longest names put in the socket
# directory are the workers' .ts.sock.<port> and the management socket.
SOCKET_PATH_MAX = 107
_LONGEST_SOCKET_NAME = max(len("/.ts.sock.65535"), len("/" + MANAGEMENT_SOCKET))
# `torchserve --start` returns once the JVM is forked (seconds); `--stop` once it has signalled it.
LAUNCH_TIMEOUT = 120.0
STOP_COMMAND_TIMEOUT = 60.0


def render_config(
    base: Path,
    ports: Ports,
    model_store: Path,
    overrides: Mapping[str, str] | None = None,
    inference_host: str = "127.0.0.1",
    management_socket: Path | None = None,
) -> str:
    """The base config with ports, model store and overrides replaced; every other line kept as is.

    Management, metrics and gRPC keep the base config's bind addresses (only their ports change), so
    a server started from here listens where production would; inference binds `inference_host`.
    A base whose management_address is `unix:` gets `management_socket` there instead of a port.
    """
    text = base.read_text()
    current = dict(re.findall(r"^([A-Za-z_.]+)=(.*)$", text, flags=re.MULTILINE))

    def with_port(key: str, port: int) -> str:
        return re.sub(r":\d+$", f":{port}", current[key])

    if current["management_address"].startswith("unix:"):
        if management_socket is None:
            raise ValueError(f"{base} puts the management API on a unix socket: pass management_socket")
        management = f"unix:{management_socket}"
    else:
        management = with_port("management_address", ports.management)
    values = {
        "inference_address": f"http://{inference_host}:{ports.inference}",
        "management_address": management,
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


def socket_dir_for(tmpdir: Path) -> Path:
    """`tmpdir`, or, when a socket path in it would pass the 107-byte limit of a unix socket's
    address, a short directory in the system temp dir named after it: the same name every time, so
    a later command (`make fleet-stop`, `serving.fleet status`) finds the management socket again."""
    if len(str(tmpdir)) + _LONGEST_SOCKET_NAME <= SOCKET_PATH_MAX:
        return tmpdir
    return Path(tempfile.gettempdir()) / f"ts-{hashlib.sha256(str(tmpdir).encode()).hexdigest()[:16]}"


def make_private_dir(path: Path) -> None:
    """Create `path` with mode 0700, or check that an existing one is a real directory of this user.

    A predictable name in a shared /tmp can be planted first by another user (a symlink, or a
    directory they own and can read); sockets and unpacked archives must not land in it.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(
            f"{path} is not a directory owned by uid {os.getuid()} (a symlink, or another user's): "
            "remove it, then start again"
        )
    os.chmod(path, 0o700)  # mkdir's mode passes through the umask; an old directory may be wider


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
        self.tmpdir = self.workdir / "tmp"
        self.socket_dir = socket_dir_for(self.tmpdir)
        self._make_private_dirs()
        self.management_socket = (
            self.socket_dir / MANAGEMENT_SOCKET if _management_on_unix_socket(base_config) else None
        )
        self.config_path.write_text(
            render_config(
                base_config, self.ports, self.model_store, overrides, management_socket=self.management_socket
            )
        )
        self.launcher_log = self.workdir / "torchserve.out"
        endpoints = Endpoints(
            inference=f"http://127.0.0.1:{self.ports.inference}",
            management=(
                unix_url(str(self.management_socket))
                if self.management_socket is not None
                else f"http://127.0.0.1:{self.ports.management}"
            ),
            metrics=f"http://127.0.0.1:{self.ports.metrics}",
        )
        self.key_file = self.workdir / "key_file.json"
        self.client = TorchServeClient(endpoints, self.key_file)

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "TMPDIR": str(self.tmpdir),
            # `torchserve` makes TEMP the JVM's java.io.tmpdir, where the workers' unix sockets go
            # (.ts.sock.9000, .9001, ... in every instance): servers sharing /tmp would connect to
            # each other's workers.
            "TEMP": str(self.socket_dir),
            "LOG_LOCATION": str(self.workdir / "logs"),
            "METRICS_LOCATION": str(self.workdir / "logs"),
        }
        env.pop("TS_CONFIG_FILE", None)  # it would override --ts-config
        return env

    def command(self, *args: str) -> list[str]:
        return [torchserve_binary(), *args]

    def start_args(self) -> list[str]:
        args = ["--start", "--ncs", "--model-store", str(self.model_store)]
        args += ["--ts-config", str(self.config_path)]
        return [*args, "--models", *self.models] if self.models else args

    def start(self, timeout: float = 300.0, launch_timeout: float = LAUNCH_TIMEOUT) -> None:
        self._make_private_dirs()
        if self.management_socket is not None and not self._frontend_alive():
            # A killed JVM leaves its socket file behind, and binding over it would fail.
            self.management_socket.unlink(missing_ok=True)
        args = self.start_args()
        # A file, not a pipe: the JVM inherits the launcher's stdout and keeps it open for good.
        with self.launcher_log.open("w") as out:
            try:
                launcher = subprocess.run(
                    self.command(*args),
                    cwd=self.workdir,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=launch_timeout,
                )
            except subprocess.TimeoutExpired as error:
                raise RuntimeError(
                    f"torchserve --start did not return within {launch_timeout:.0f}s (killed); "
                    f"see {self.launcher_log} and {self.workdir / 'logs'}"
                ) from error
        if launcher.returncode != 0:  # e.g. "TorchServe is already running" (its pid file's process)
            said = self.launcher_log.read_text(errors="replace").strip()[-500:]
            raise RuntimeError(f"torchserve --start exited {launcher.returncode}: {said}")
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float) -> None:
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

    def _frontend_alive(self) -> bool:
        java = self.java_pid()
        return java is not None and process_alive(java)

    def _make_private_dirs(self) -> None:
        for directory in dict.fromkeys((self.tmpdir, self.socket_dir)):
            make_private_dir(directory)

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

    def stop(self, timeout: float = 60.0, stop_command_timeout: float = STOP_COMMAND_TIMEOUT) -> None:
        """`torchserve --stop`, SIGKILL for whatever is left after `timeout`, then the private
        directories go (sockets, pid file, unpacked archives)."""
        java, workers = self.java_pid(), self.worker_pids()
        # On a timeout run() kills the launcher; the SIGKILLs below end the server it was stopping.
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                self.command("--stop"),
                cwd=self.workdir,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                timeout=stop_command_timeout,
            )
        pids = [pid for pid in [java, *workers] if pid is not None]
        left = wait_gone(pids, timeout, poll=0.2)  # only a wedged server leaves any
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        wait_gone(left, 10.0, poll=0.05)
        for directory in dict.fromkeys((self.socket_dir, self.tmpdir)):
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> TorchServe:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _management_on_unix_socket(config: Path) -> bool:
    found = re.search(r"^management_address=(.*)$", config.read_text(), flags=re.MULTILINE)
    return found is not None and found.group(1).startswith("unix:")


def torchserve_binary() -> str:
    """The launcher installed beside this interpreter (the venv's), else whichever is on PATH."""
    return shutil.which("torchserve", path=str(Path(sys.executable).parent)) or "torchserve"


def is_backend_worker(pid: int) -> bool:
    """A live TorchServe Python worker process (not a zombie, not another child of the frontend)."""
    state, cmdline = process_state(pid), command_line(pid)
    if state is None or cmdline is None:
        return False
    return state != "Z" and "model_service_worker" in cmdline
