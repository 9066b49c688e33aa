"""Host memory counts a page shared by fork once, across the process and its children."""

from __future__ import annotations

import os
import signal

from bench.process_memory import host_memory_mb

MB = 2**20


def test_a_buffer_shared_with_a_forked_child_counts_once() -> None:
    buffer = bytearray(os.urandom(MB)) * 96  # 96 MB, every page written before the fork
    before = host_memory_mb([os.getpid()])
    child = os.fork()
    if child == 0:
        signal.pause()  # hold the shared pages, write nothing
        os._exit(0)
    try:
        after = host_memory_mb([os.getpid()])
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert after["processes"] == before["processes"] + 1
    # The child maps every page of the parent (96 MB of buffer and the rest): summed RSS would count
    # them twice, PSS once. Only the child's own few pages may add.
    assert after["pss_mb"] - before["pss_mb"] < 0.25 * before["pss_mb"] + 16
    assert after["uss_mb"] < before["uss_mb"]  # the parent's pages are no longer its alone
    assert len(buffer) == 96 * MB
