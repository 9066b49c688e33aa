"""Run TorchServe in the foreground and stop it gracefully on SIGTERM: the image's and unit's PID 1.

python -m serving.graceful [--drain-seconds 30] -- torchserve --start --foreground --ncs ...

`torchserve --foreground` ignores SIGTERM as PID 1 (the launcher has no handler, and PID 1 gets no
default ones), so `docker stop` kills it after 10 s and a pod waits out its grace period, with the
requests in flight failing either way. On SIGTERM or SIGINT this wrapper:
1. writes the drain marker in the service's state directory, so `python -m serving.health` (the
   HEALTHCHECK) turns unhealthy and a load balancer stops sending work;
2. waits until TorchServe is idle (no request queued for any model version and no worker using
   CPU) for `--quiet-seconds`, at most `--drain-seconds`;
3. runs `torchserve --stop`, waits for it, and exits with TorchServe's status.
Requests that still arrive during the drain are served; those after the stop are refused.
It also reaps orphans, the other job of a PID 1.

The state directory is ZH_EN_STATE_DIR, else systemd's STATE_DIRECTORY (StateDirectory=), else
./state: the image's /srv/zh_en/state (an emptyDir in a pod), the unit's /var/lib/zh_en. Not /tmp,
where any local user could plant the marker (the service reports unhealthy) or a symlink in its
place (the service would write through it).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import requests

from serving.client import Endpoints, ServerError, TorchServeClient
from serving.torchserve import torchserve_binary


def state_dir() -> Path:
    """ZH_EN_STATE_DIR, else the first of systemd's STATE_DIRECTORY, else ./state."""
    systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(os.environ.get("ZH_EN_STATE_DIR") or systemd or "state")


# Shared with the health check (serving.health), which runs in the same directory with the same environment.
DRAIN_MARKER = state_dir() / "zh_en.draining"
# `torchserve --stop` signals the frontend and returns; a launcher stuck longer than this is given up on.
STOP_TIMEOUT = 30.0
# A worker below this share of one core is waiting for work (its idle loop blocks on a socket).
IDLE_CPU_SHARE = 0.05


@dataclass(frozen=True)
class Load:
    """What TorchServe still has to do: requests queued over every version, workers' CPU seconds."""

    pending: int
    worker_cpu_seconds: float


def current_load(client: TorchServeClient) -> Load:
    pending, cpu_seconds = 0, 0.0
    for model in client.models():
        for version in client.describe(model):
            pending += int(version.get("jobQueueStatus", {}).get("pendingRequests", 0))
            for worker in version.get("workers", []):
                try:
                    times = psutil.Process(int(worker["pid"])).cpu_times()
                except (psutil.Error, KeyError, ValueError):
                    continue  # a worker restarting or gone is not working
                cpu_seconds += times.user + times.system
    return Load(pending, cpu_seconds)


def drain(client: TorchServeClient, limit: float, quiet: float, poll: float = 0.25) -> tuple[bool, float]:
    """Wait until TorchServe has been idle for `quiet` seconds, at most `limit`: (drained, seconds)."""
    started = time.monotonic()
    idle_since: float | None = None
    previous: Load | None = None
    while (now := time.monotonic()) - started < limit:
        try:
            load = current_load(client)
        except (requests.RequestException, ServerError, ValueError):
            return False, now - started  # the management API is gone: nothing left to wait for
        computing = previous is not None and (
            load.worker_cpu_seconds - previous.worker_cpu_seconds > IDLE_CPU_SHARE * poll
        )
        working = previous is None or load.pending > 0 or computing
        idle_since = None if working else (idle_since or now)
        if idle_since is not None and now - idle_since >= quiet:
            return True, now - started
        previous = load
        time.sleep(poll)
    return False, time.monotonic() - started


def add_drain_seconds(parser: argparse.ArgumentParser) -> None:
    """--drain-seconds, defaulting to ZH_EN_DRAIN_SECONDS (30): the image, the units and the pods set it."""
    default = float(os.environ.get("ZH_EN_DRAIN_SECONDS", 30))
    parser.add_argument("--drain-seconds", type=float, default=default, help="ZH_EN_DRAIN_SECONDS")


class Supervisor:
    """TorchServe as a child process; a stop request turns into a drain and `torchserve --stop`."""

    def __init__(self, command: list[str], client: TorchServeClient, marker: Path) -> None:
        self.command = command
        self.client = client
        self.marker = marker
        self.stop_requested = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    def run(self, drain_seconds: float, quiet_seconds: float) -> int:
        self.marker.unlink(missing_ok=True)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop_requested.set())
        self.child = subprocess.Popen(self.command)
        while self.exit_code is None and not self.stop_requested.wait(0.2):
            self._reap()
        if self.exit_code is None:
            self._stop(drain_seconds, quiet_seconds)
        return self.exit_code if self.exit_code is not None else 1

    def _stop(self, drain_seconds: float, quiet_seconds: float) -> None:
        self.marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.marker.write_text("draining\n")
        log(f"stop requested: unhealthy now; draining for at most {drain_seconds:g} s")
        drained, seconds = drain(self.client, drain_seconds, quiet_seconds)
        log(f"{'drained' if drained else 'drain limit reached'} after {seconds:.1f} s; stopping TorchServe")
        try:
            subprocess.run(
                [torchserve_binary(), "--stop"], check=False, stdout=subprocess.DEVNULL, timeout=STOP_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            log(f"torchserve --stop did not return within {STOP_TIMEOUT:g} s; waiting for TorchServe to exit")
        deadline = time.monotonic() + 30
        while self.exit_code is None and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.1)
        if self.exit_code is None and self.child is not None:
            self.child.kill()
            self.exit_code = self.child.wait()

    def _reap(self) -> None:
        """Collect every exited child: TorchServe's own, and orphans reparented to us as PID 1."""
        assert self.child is not None
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child.pid:
                self.child.returncode = self.exit_code = os.waitstatus_to_exitcode(status)


def log(message: str) -> None:
    print(f"serving.graceful: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_drain_seconds(parser)
    parser.add_argument("--quiet-seconds", type=float, default=1.0, help="idle this long counts as drained")
    parser.add_argument("--management", default=Endpoints.management)
    parser.add_argument("--key-file", type=Path, default=Path("key_file.json"))
    parser.add_argument("--marker", type=Path, default=DRAIN_MARKER)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- torchserve --start --foreground ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the TorchServe command after --")
    client = TorchServeClient(Endpoints(management=args.management), args.key_file, timeout=5.0)
    return Supervisor(command, client, args.marker).run(args.drain_seconds, args.quiet_seconds)


if __name__ == "__main__":
    raise SystemExit(main())
