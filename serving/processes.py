"""Watching processes we did not start ourselves, through /proc: is one alive, what is it running.

TorchServe's Java frontend forks the Python workers and nginx its own workers, so stopping a server
or a front door means waiting on pids that are not our children, and telling a live process from a
zombie or an exiting one. /proc/<pid>/stat is parsed in one place (`stat_state`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path


def stat_state(stat: str) -> str:
    """The state letter (R, S, D, Z, T, ...) from the text of a /proc/<pid>/stat file.

    The second field is the command name in parentheses, and the name may itself hold spaces and
    parentheses ("1 (a) b) S 0 ..."), so the fields after it start after the line's last ")".
    """
    return stat.rsplit(")", 1)[1].split()[0]


def stat_parent(stat: str) -> int:
    """The parent's pid from the text of a /proc/<pid>/stat file (the field after the state)."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def process_state(pid: int) -> str | None:
    """`pid`'s state letter; None when its stat file cannot be read (the process is gone)."""
    try:
        return stat_state(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def command_line(pid: int) -> str | None:
    """`pid`'s arguments joined by spaces (a process may retitle itself here); None when gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of ours still answers kill(0); it is gone for our purposes. It may also exit and
    # be reaped between the two looks, so a vanished stat file is an answer too.
    return process_state(pid) in ("R", "S", "D")


def live_children(pid: int) -> list[int]:
    """`pid`'s children that are alive (not zombies), found by their parent in /proc/*/stat (a
    worker's step partitions are its children; /proc/<pid>/task/*/children is not on every kernel)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone while we looked
        if stat_parent(stat) == pid and stat_state(stat) in ("R", "S", "D"):
            children.append(int(entry.name))
    return sorted(children)


def wait_gone(pids: Sequence[int], timeout: float, poll: float = 0.1) -> list[int]:
    """Wait up to `timeout` seconds for every pid to exit; the ones still alive then."""
    deadline = time.monotonic() + timeout
    while (alive := [pid for pid in pids if process_alive(pid)]) and time.monotonic() < deadline:
        time.sleep(poll)
    return alive
