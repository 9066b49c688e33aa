"""Where a load run's CPU time goes, by kind of process, per request.

Issue 44 asks why the batch job, which pays for no HTTP, no Java frontend and no load generator,
is not 1.5x the server's sentences/s. Over one Locust run this reads the CPU seconds of each kind of
serving process (for TorchServe: the Java frontend, the Python workers that run the handler, and
their partition processes, which decode), of the load generator (Locust: the children this process
waited for in the meantime) and of the whole host (/proc/stat), and divides each by the requests
answered. Beside the job's CPU seconds per sentence, it says what the job could gain at most: the
server's whole host per request against the job's per sentence.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

Roles = Callable[[], Mapping[str, Sequence[int]]]
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


def children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Snapshot:
    """Every named process's CPU seconds, this process's waited children's, the host's, the clock."""

    by_role: dict[str, dict[int, float]] = field(default_factory=dict)
    children: float = 0.0
    host: float | None = None
    wall: float = 0.0

    @classmethod
    def take(cls, roles: Mapping[str, Sequence[int]]) -> Snapshot:
        by_role = {
            role: {pid: seconds for pid in pids if (seconds := process_seconds(pid)) is not None}
            for role, pids in roles.items()
        }
        return cls(by_role, children_seconds(), host_busy_seconds(), time.monotonic())


def account(before: Snapshot, after: Snapshot, requests: int, cores: int) -> dict[str, Any]:
    """CPU seconds of each role between two snapshots, and per request in ms.

    A process seen only at the end started during the run: all its time counts. One seen only at
    the start ended during it: its last part is lost (named in `ended`). The rest of the host is
    the host's busy time less everything named (negative only within /proc's tick rounding).
    """
    seconds: dict[str, float] = {}
    ended = 0
    for role, now in after.by_role.items():
        then = before.by_role.get(role, {})
        seconds[role] = sum(value - then.get(pid, 0.0) for pid, value in now.items())
        ended += len(set(then) - set(now))
    seconds[LOAD_GENERATOR] = after.children - before.children
    wall = after.wall - before.wall
    figures: dict[str, Any] = {"seconds": round(wall, 2), "cores": cores, "requests": requests}
    if before.host is not None and after.host is not None:
        host = after.host - before.host
        seconds[REST_OF_HOST] = host - sum(seconds.values())
        figures["host_busy_share"] = round(host / (wall * cores), 3) if wall else None
        figures["host_ms_per_request"] = round(1000 * host / requests, 2) if requests else None
    figures["cpu_seconds"] = {role: round(value, 2) for role, value in seconds.items()}
    figures["ms_per_request"] = {
        role: round(1000 * value / requests, 2) if requests else None for role, value in seconds.items()
    }
    figures["ended_during_run"] = ended
    return figures


def torchserve_roles(server: Any) -> dict[str, list[int]]:
    """A running TorchServe's processes by kind (serving.torchserve.TorchServe): the frontend, the
    backend workers (the handler), and every process under them (step partitions, which decode)."""
    workers = list(server.worker_pids())
    partitions = []
    for pid in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            partitions += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    java = server.java_pid()
    return {
        "frontend (Java)": [java] if java is not None else [],
        "handler workers": workers,
        "partitions": partitions,
    }
