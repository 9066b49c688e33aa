"""Killing a partition process in tests, and waiting for the worker side to replace it."""

from __future__ import annotations

import os
import signal

from handlers.scheduling.partition_processes import ProcessPartitions
from tests.waiting import wait_until


def kill_partition(partitions: ProcessPartitions, index: int) -> int:
    """SIGKILL partition `index`, as the OOM killer or an operator would; its pid."""
    pid = partitions.pids[index]
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_replaced(partitions: ProcessPartitions, index: int, dead: int, timeout: float = 30.0) -> int:
    """The pid of the partition that replaced `dead` at `index`, once its reader has forked it."""
    wait_until(
        lambda: partitions.pids[index] != dead, timeout, f"partition {index} (pid {dead}) replaced", 0.01
    )
    return partitions.pids[index]
