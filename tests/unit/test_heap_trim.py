"""Idle heap trimming: glibc's heap goes back to the system once work stops, never during it."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from handlers.heap_trim import IdleTrim, malloc_trim


def private_mb() -> float:
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("RssAnon:")).split()[1]) / 1024


def test_trims_once_after_the_idle_time_and_not_while_busy() -> None:
    calls: list[float] = []
    heap = IdleTrim(0.1, trim=lambda: calls.append(time.monotonic()))
    heap.idle()
    heap.busy()  # work came back before the idle time passed
    time.sleep(0.3)
    assert calls == []
    heap.idle()
    heap.idle()  # re-armed, not doubled
    time.sleep(0.3)
    assert len(calls) == 1 and heap.trims == 1


def test_a_trim_gives_freed_heap_back() -> None:
    trim = malloc_trim()
    assert trim is not None, "glibc's malloc_trim is missing on this Linux host"
    # Blocks just under glibc's mmap threshold live in the heap, and stay there once freed.
    blocks = [torch.ones(30_000) for _ in range(4000)]  # 120 KB each, about 460 MB
    held = private_mb()
    del blocks
    before = private_mb()
    trim()
    after = private_mb()
    assert before - after > 300, f"held {held:.0f} MB, {before:.0f} after free, {after:.0f} after trim"
