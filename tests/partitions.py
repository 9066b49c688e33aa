"""Stopping partition processes in tests (a worker's partitions end with the worker)."""

from __future__ import annotations

import os
import signal

from handlers.scheduling.partition_processes import ProcessPartitions


def stop_partitions(partitions: ProcessPartitions) -> None:
    partitions.closing = True  # their readers then end quietly instead of ending this process
    for pid in partitions.pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
