"""Where a load run's CPU time goes, by kind of process, per request.

Issue 44 asks why the batch job, which pays for no HTTP, no Java frontend and no load generator,
is not 1.5x the server's sentences/s. Over the steady middle of one Locust run (`Window`: not its
start, not the requests left in flight at its end) this reads the CPU seconds of each kind of
serving process (for TorchServe: the Java frontend, the Python workers that run the handler, and
their partition processes, which decode), of Locust and of the whole host (/proc/stat), and the
requests Locust had answered at each end (bench/locustfile.py writes its count when signalled).
Each kind's CPU a second over the requests answered a second is its ms per request. With the job
and the server each keeping the host busy, the host's ms per request over the job's per sentence
is the ratio of their rates (bench.report sets them side by side).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.process_memory import descendants

Roles = Callable[[], Mapping[str, Sequence[int]]]
# The locustfile appends "<time> <requests answered>" to this file on SIGUSR1 ("ready" first).
MARKS_ENV = "ZH_EN_MARKS"
LOAD_GENERATOR = "load generator (Locust)"
REST_OF_HOST = "rest of the host"


def process_seconds(pid: int) -> float | None:
    """User and system CPU seconds of one process (not its children); None once it is gone."""
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    return None


def host_busy_seconds(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds the host's cores spent on anything but idling and waiting for I/O, all cores
    together (the first line of /proc/stat, in clock ticks); None where there is no /proc."""
    if not stat.exists():
        return None
    fields = [int(value) for value in stat.read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass
class Snapshot:
    """Every named process's CPU seconds, the host's, and the clock."""

    by_role: dict[str, dict[int, float]] = field(default_factory=dict)
    host: float | None = None
    wall: float = 0.0

    @classmethod
    def take(cls, roles: Mapping[str, Sequence[int]]) -> Snapshot:
        by_role = {
            role: {pid: seconds for pid in pids if (seconds := process_seconds(pid)) is not None}
            for role, pids in roles.items()
        }
        return cls(by_role, host_busy_seconds(), time.monotonic())


@dataclass(frozen=True)
class Window:
    """The part of a Locust run to account: from `skip` seconds after its start, for `length`."""

    skip: float
    length: float

    @classmethod
    def of(cls, duration: str) -> Window | None:
        """Locust's --run-time ("30s", "2m", "1m30s"): from 5 s in (Locust's own start and the
        users' spawn) to 1 s before it ends; None for runs under 15 s, too short for a middle."""
        parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration.strip())
        if not parts or not any(parts.groups()):
            return None
        hours, minutes, seconds = (int(part or 0) for part in parts.groups())
        total = 3600 * hours + 60 * minutes + seconds
        return cls(5.0, total - 6.0) if total >= 15 else None


def snapshots(
    locust: subprocess.Popen[bytes], marks: Path, roles: Roles, window: Window
) -> tuple[Snapshot, Snapshot] | None:
    """A snapshot at each end of `window`, each with a mark of the requests Locust has answered
    (it writes "ready" to `marks` once it can take the signal); None if Locust never got ready."""
    started = time.monotonic()
    while "ready" not in (marks.read_text() if marks.exists() else ""):
        if locust.poll() is not None or time.monotonic() - started > window.skip + 30:
            return None
        time.sleep(0.1)
    taken = []
    for wait in (window.skip - (time.monotonic() - started), window.length):
        time.sleep(max(0.0, wait))
        taken.append(Snapshot.take({**roles(), LOAD_GENERATOR: [locust.pid]}))
        locust.send_signal(signal.SIGUSR1)
    return taken[0], taken[1]


def marked_rate(marks: Path) -> float | None:
    """Requests a second between Locust's first two marks ("<time> <answered>" lines)."""
    lines = [line.split() for line in marks.read_text().splitlines() if len(line.split()) == 2]
    if len(lines) < 2:
        return None
    (then, before), (now, after) = ((float(at), int(count)) for at, count in lines[:2])
    return (after - before) / (now - then) if now > then else None


def account(before: Snapshot, after: Snapshot, rate: float, cores: int) -> dict[str, Any]:
    """CPU seconds of each role between two snapshots, and each one's ms per request: its CPU a
    second over the requests answered a second (`rate`). A process seen only at the end started in
    between: all its time counts. One seen only at the start ended in between: its last part is lost
    (counted in `ended_during_window`). The rest of the host is its busy time less everything named
    (negative only within /proc's ticks).
    """
    seconds: dict[str, float] = {}
    ended = 0
    for role, now in after.by_role.items():
        then = before.by_role.get(role, {})
        seconds[role] = sum(value - then.get(pid, 0.0) for pid, value in now.items())
        ended += len(set(then) - set(now))
    wall = after.wall - before.wall

    def per_request(cpu_seconds: float) -> float | None:
        return round(1000 * cpu_seconds / wall / rate, 2) if wall > 0 and rate > 0 else None

    figures: dict[str, Any] = {"seconds": round(wall, 2), "cores": cores, "requests_per_s": round(rate, 2)}
    if before.host is not None and after.host is not None:
        host = after.host - before.host
        seconds[REST_OF_HOST] = host - sum(seconds.values())
        figures["host_busy_share"] = round(host / (wall * cores), 3) if wall > 0 else None
        figures["host_ms_per_request"] = per_request(host)
    figures["cpu_seconds"] = {role: round(value, 2) for role, value in seconds.items()}
    figures["ms_per_request"] = {role: per_request(value) for role, value in seconds.items()}
    figures["ended_during_window"] = ended
    return figures


def tree_role(name: str, roots: Callable[[], Sequence[int]]) -> Roles:
    """One role for a server whose processes are not told apart: its roots and everything under them."""

    def roles() -> dict[str, list[int]]:
        pids = list(roots())
        return {name: pids + descendants(pids)}

    return roles


def torchserve_roles(server: Any) -> dict[str, list[int]]:
    """A running TorchServe's processes by kind (serving.torchserve.TorchServe): the frontend, the
    backend workers (the handler), and every process under them (step partitions, which decode)."""
    workers = list(server.worker_pids())
    java = server.java_pid()
    return {
        "frontend (Java)": [java] if java is not None else [],
        "handler workers": workers,
        "partitions": descendants(workers),
    }
