"""Resident memory of benchmark processes and TorchServe workers: private, file-backed, peak.

Shared by the latency ladder (one process per rung, and the HTTP rung's workers) and the layout
sweep (every worker of a point).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil


def memory_mb(pid: int | None = None) -> dict[str, int]:
    """Resident memory (psutil), split on Linux into private (anonymous) and file-backed.

    File-backed pages are the mmapped safetensors weights: shared by the workers of one model and
    reclaimable, so the private part is what each extra worker really costs.
    """
    figures = {"rss_mb": round(psutil.Process(pid).memory_info().rss / 2**20)}
    status = Path(f"/proc/{pid or 'self'}/status")
    if status.exists():
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        if "RssAnon" in fields and "RssFile" in fields:
            figures["private_mb"] = int(fields["RssAnon"].split()[0]) // 1024
            figures["file_mb"] = int(fields["RssFile"].split()[0]) // 1024
    return figures


def peak_mb(pid: int) -> int | None:
    """A process's peak RSS (VmHWM) from outside it; None where /proc is missing."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return None
    line = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) // 1024


def ready_worker_pids(server: Any) -> list[int]:
    """The pids of the model's backend workers, once all its minWorkers are READY (model loaded)."""
    version = server.client.default_version()
    wanted = int(server.client.describe(version=version)[0].get("minWorkers", 1))
    server.client.wait_ready(version, wanted)
    return list(server.worker_pids())


def workers_memory(pids: Sequence[int]) -> dict[str, Any]:
    """Mean figures per worker, the workers' private total, the largest worker's peak and the count."""
    workers = [memory_mb(pid) for pid in pids]
    if not workers:
        return {}
    keys = [key for key in workers[0] if all(key in w for w in workers)]
    figures: dict[str, Any] = {key: round(statistics.fmean(w[key] for w in workers)) for key in keys}
    if "private_mb" in keys:
        figures["private_mb_total"] = sum(w["private_mb"] for w in workers)
    peaks = [peak for pid in pids if (peak := peak_mb(pid)) is not None]
    return {**figures, "peak_mb": max(peaks, default=None), "workers": len(workers)}


def descendants(pids: Sequence[int]) -> list[int]:
    """Every process under `pids` (not themselves), where they still run."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return found


def host_memory_mb(pids: Sequence[int]) -> dict[str, int]:
    """What serving processes cost the host together: `pids` and every descendant (a step worker's
    partitions), as PSS summed (each shared page split among the processes that map it, so a
    model's weights shared by fork or by a file count once) and USS (pages one process alone holds).
    """
    processes: dict[int, psutil.Process] = {}
    for pid in dict.fromkeys([*pids, *descendants(pids)]):
        with contextlib.suppress(psutil.NoSuchProcess):
            processes[pid] = psutil.Process(pid)
    pss = uss = 0
    for process in processes.values():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            info = process.memory_full_info()
            pss, uss = pss + info.pss, uss + info.uss
    return {"pss_mb": round(pss / 2**20), "uss_mb": round(uss / 2**20), "processes": len(processes)}
