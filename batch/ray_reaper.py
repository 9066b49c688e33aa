"""A local Ray session ends with its job, however the job ends.

`ray.init()` on this host starts Ray's own processes (GCS, raylet, the dashboard and runtime-env
agents, workers). `ray.shutdown()` stops them when the job ends normally; a SIGKILLed job runs no
code, and Ray's agents outlived it (docs/BATCH.md). So the job starts a watcher in its own session
(a kill of the job's process group spares it) that notes the job's processes while it runs, and
once the job's process has ended kills them and every process whose command line names the Ray
session's directory.

    python -m batch.ray_reaper JOB_PID SESSION_DIR     # what `watch` starts
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys

import psutil

SNAPSHOT_MS = 500  # how often the watcher notes the job's processes


def session_dir() -> str | None:
    """The directory of this process's local Ray session (Ray names it on every one of its
    processes' command lines), or None where Ray no longer says."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)  # no public API names it
    path = getattr(node, "get_session_dir_path", lambda: None)()
    return str(path) if path else None


def watch(session_dir: str) -> subprocess.Popen[bytes]:
    """A watcher for this process and the Ray session at `session_dir`."""
    return subprocess.Popen(
        [sys.executable, "-m", "batch.ray_reaper", str(os.getpid()), session_dir],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def reap(session_dir: str) -> int:
    """Kill every process of the session (this one aside); how many there were.

    Ray's workers retitle themselves (`ray::MapWorker...`), so they are found as children of the
    processes that name the session (the raylet)."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(session_dir in arg for arg in process.info["cmdline"] or ()):
                found |= {child.pid: child for child in process.children(recursive=True)}
                found[process.pid] = process
    found.pop(os.getpid(), None)
    for process in found.values():
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(list(found.values()), timeout=10)
    return len(found)


def watch_until_exit(pid: int) -> dict[int, psutil.Process]:
    """Every process seen below `pid` while it ran, once it has ended. Ray's agents retitle
    themselves (`ray::DashboardAgent`) and outlive the raylet that named the session, so they
    are known by having been the job's descendants."""
    seen: dict[int, psutil.Process] = {}
    try:
        job = psutil.Process(pid)
        descriptor = os.pidfd_open(pid)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return seen
    poller = select.poll()
    poller.register(descriptor, select.POLLIN)
    try:
        while not poller.poll(SNAPSHOT_MS):  # readable once the process has ended
            with contextlib.suppress(psutil.Error):
                seen |= {child.pid: child for child in job.children(recursive=True)}
    finally:
        os.close(descriptor)
    return seen


def main(argv: list[str]) -> int:
    pid, session_dir = int(argv[0]), argv[1]
    seen = watch_until_exit(pid)
    seen.pop(os.getpid(), None)  # started by the job, so one of its processes too
    for process in seen.values():
        with contextlib.suppress(psutil.Error):  # psutil refuses a pid reused since
            process.kill()
    psutil.wait_procs(list(seen.values()), timeout=10)
    reap(session_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
