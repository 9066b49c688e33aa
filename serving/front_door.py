"""Run the fleet's front door: one nginx master with its own prefix, config, pid file and logs.

    door = FrontDoor(FrontDoorPaths(run_dir), FrontDoorConfig())
    door.configure([replica ports]); door.start(); ...; door.reload(); door.stop()

nginx daemonizes, so the front door outlives the command that started it (`make fleet`); the pid
file finds it again (`make fleet-stop`). A reload is validated with `nginx -t` first: a bad config
would otherwise be refused silently while the old one keeps serving.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import requests

from serving.fleet_keys import KeyStore
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths, render, write_status_targets, write_upstreams
from serving.processes import command_line, process_alive, wait_gone

# The master's whole line for a worker that died of a signal, "2026/11/29 07:20:44 [alert] 3612#3612:
# worker process 3626 exited on signal 9": anchored at both ends, so that a client's request text,
# which nginx writes into other error lines (escaping line breaks), cannot pass for one and force
# reloads. Linear: no quantifier overlaps another.
KILLED_WORKER = re.compile(
    rb"^[\d/]+ [\d:]+ \[alert\] \d+#\d+: worker process \d+ exited on signal \d+(?: \(core dumped\))?$", re.M
)


class NginxError(RuntimeError):
    """nginx refused a command; carries what it printed."""


def nginx_binary() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        raise FileNotFoundError(
            "nginx not found: run `make nginx` (apt-get install nginx libnginx-mod-http-js)"
        )
    return found


@dataclass(frozen=True)
class FrontDoor:
    paths: FrontDoorPaths
    config: FrontDoorConfig

    @property
    def url(self) -> str:
        return f"http://{self.config.listen}"

    @property
    def keys(self) -> KeyStore:
        return KeyStore(self.paths.keys)

    def configure(self, ports: Sequence[int], metrics_ports: Mapping[str, int] | None = None) -> None:
        """Render the config for these replica ports and check it; start() or reload() applies it.

        `metrics_ports` (replica name -> metrics port) feeds the status page; none: it lists no replica.
        """
        render(self.config, self.paths)
        self.keys.ensure()
        write_upstreams(self.paths, ports, self.config)
        write_status_targets(self.paths, metrics_ports or {})
        self._nginx("-t")

    def master_pid(self) -> int | None:
        try:
            pid = int(self.paths.pid.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if process_alive(pid) else None

    def worker_pids(self, serving_only: bool = False) -> set[int]:
        """The master's live workers; `serving_only` leaves out old ones shutting down after a reload."""
        master = self.master_pid()
        if master is None:
            return set()
        out = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout
        pids = {int(pid) for pid in out.split() if process_alive(int(pid))}
        return {pid for pid in pids if not serving_only or not _shutting_down(pid)}

    def draining(self) -> set[int]:
        """Old workers still finishing their requests after a reload (not the cache manager)."""
        return self.worker_pids() - self.worker_pids(serving_only=True)

    def start(self, timeout: float = 30.0) -> None:
        if self.master_pid() is not None:
            raise NginxError(f"a front door already runs from {self.paths.run_dir} (pid {self.master_pid()})")
        # A killed nginx leaves its unix socket behind, and bind() would refuse the next start.
        self.paths.stage_socket.unlink(missing_ok=True)
        self._nginx()  # returns once the master has bound the port and daemonized
        deadline = time.monotonic() + timeout
        while not self.worker_pids():
            if time.monotonic() > deadline:
                raise NginxError(f"nginx started no worker in {timeout:.0f}s; see {self.paths.logs}")
            time.sleep(0.1)

    def reload(self, timeout: float = 30.0) -> None:
        """Apply the rendered config, keys and upstreams; returns once only new workers accept.

        Old workers finish the requests they hold, then exit: nothing in flight is dropped.
        """
        self._nginx("-t")
        before = self.worker_pids()
        self._nginx("-s", "reload")
        deadline = time.monotonic() + timeout
        # Done when only new workers accept: an old one sets its title to "shutting down" in the
        # same step that closes its listening sockets, then finishes its requests and exits.
        while not (serving := self.worker_pids(serving_only=True)) or serving & before:
            if time.monotonic() > deadline:
                raise NginxError(
                    f"nginx did not switch to new workers in {timeout:.0f}s; see {self.paths.logs}"
                )
            time.sleep(0.05)

    def killed_workers(self, offset: int = 0) -> tuple[int, int]:
        """Workers killed by a signal (SIGKILL, a crash) that the master logged after byte `offset` of its
        error log, and the log's new end: (count, offset). A worker that exits after a reload or a
        quit exits normally and is not counted."""
        log = self.paths.logs / "error.log"
        try:
            with log.open("rb") as handle:
                handle.seek(offset if offset <= log.stat().st_size else 0)  # rotated: from the start
                text = handle.read()
                end = handle.tell()
        except OSError:
            return 0, 0
        return len(KILLED_WORKER.findall(text)), end

    def renew_connection_slots(self) -> None:
        """Reload with an empty per-address connection zone under a new name (nginx.conf). A killed
        worker never gives back the slots of the connections it held, so after enough kills an address
        is refused for good (429) though it has nothing open. The old zone goes with the old workers."""
        self.paths.connection_zone_generation.write_text(f"{self.paths.zone_generation() + 1}\n")
        render(self.config, self.paths)
        self.reload()

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful quit (requests in flight finish), then SIGKILL whatever is left after `timeout`."""
        master = self.master_pid()
        if master is None:
            return
        pids = [master, *self.worker_pids()]
        self._nginx("-s", "quit")
        for pid in wait_gone(pids, timeout):
            os.kill(pid, signal.SIGKILL)
        if not self.paths.worker_dir.is_relative_to(self.paths.run_dir):
            shutil.rmtree(self.paths.worker_dir, ignore_errors=True)  # its own dir in the temp dir

    def healthz(self, timeout: float = 10.0) -> requests.Response:
        return requests.get(f"{self.url}/healthz", timeout=timeout)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.healthz().status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise NginxError(f"{self.url}/healthz not 200 after {timeout:.0f}s; see {self.paths.logs}")
            time.sleep(0.2)

    def _nginx(self, *args: str) -> None:
        command = [
            nginx_binary(),
            "-p",
            str(self.paths.run_dir),
            "-c",
            str(self.paths.conf),
            "-e",
            str(self.paths.logs / "error.log"),
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NginxError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")


def _shutting_down(pid: int) -> bool:
    title = command_line(pid)
    return title is None or "shutting down" in title  # None: gone
