"""Idle heap trimming: glibc's heap goes back to the system once work stops, never during it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from handlers.handler_config import HandlerConfig
from handlers.model.heap_trim import IdleTrim, malloc_trim
from handlers.model.search import RowLimits
from handlers.model.translator import Translator
from handlers.scheduling.inline import InlineDriver
from handlers.scheduling.run import SHIPPED, decode_ids, scheduler_for
from handlers.scheduling.step_scheduler import StepScheduler
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


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


# In a fresh interpreter, so that the heap's layout is this script's alone: every other block is
# kept, so the freed ones are holes in the heap that free() cannot hand back and a trim can.
HOLES = """
import torch
from handlers.model.heap_trim import malloc_trim
from tests.unit.test_heap_trim import private_mb
trim = malloc_trim()
blocks = [torch.ones(30_000) for _ in range(4000)]  # 120 KB each (under the mmap threshold)
kept = blocks[::2]
del blocks
before = private_mb()
trim()
print(before - private_mb())
"""


def test_a_trim_gives_back_the_holes_a_batch_leaves_in_the_heap() -> None:
    assert malloc_trim() is not None, "glibc's malloc_trim is missing on this Linux host"
    out = subprocess.run(
        [sys.executable, "-c", HOLES], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stdout
    assert float(out) > 150, f"a trim gave back {float(out):.0f} MB of about 230 MB of holes"


# A load's pattern: a large temporary (a layer's fp32 copy) freed after a kept block is made from it.
LOAD = """
import contextlib, ctypes, sys
import torch
from handlers.model.heap_trim import allocations_outside_the_heap

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
kept = []
with allocations_outside_the_heap() if sys.argv[1] == "outside" else contextlib.nullcontext():
    for _ in range(200):
        temporary = torch.ones(250_000)  # 1 MB
        kept.append(torch.ones(62_500))  # 250 KB
        del temporary
print(libc.mallinfo2().fordblks / 2**20)  # bytes free inside the heap: its holes
"""


def test_what_loading_frees_leaves_no_holes_in_the_heap() -> None:
    def holes_mb(mode: str) -> float:
        run = [sys.executable, "-c", LOAD, mode]
        return float(subprocess.run(run, capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout)

    default, outside = holes_mb("default"), holes_mb("outside")
    print(f"free inside the heap after a load: {default:.0f} MB by default, {outside:.0f} MB outside")
    assert default > 100, "the pattern no longer leaves holes under glibc's defaults: the test shows nothing"
    assert outside < 10


# After a load: a cohort's buffers freed (the last first, so that they join the heap's free top), then
# as many again for the next cohort. Printed: the page faults taking them the second time cost.
REUSE = """
import ctypes, resource
from handlers.model.heap_trim import allocations_outside_the_heap
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
with allocations_outside_the_heap():
    pass
def cohort():
    size = 30 << 20  # under the 32 MB mmap threshold: from the heap
    blocks = [libc.malloc(size) for _ in range(4)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    for block in reversed(blocks):
        libc.free(block)
cohort()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
cohort()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_after_loading_free_gives_nothing_back_and_the_next_cohort_reuses_it() -> None:
    run = [sys.executable, "-c", REUSE]
    faults = int(subprocess.run(run, capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout)
    # Given back by free() at glibc's 64 MB trim threshold (before c1fb170): 23,008 page faults here.
    assert faults < 1_000, f"{faults} page faults: free() gave the heap back between two cohorts"


def test_a_driver_made_for_one_call_leaves_no_timer_to_trim_the_next_calls_decode(
    lively_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    translator = Translator.load(lively_model_dir, HandlerConfig(variant="int8", warmup=False).model)
    trims: list[float] = []
    heap = InlineDriver(scheduler_for(translator, SHIPPED)).heap
    monkeypatch.setattr(heap, "_trim", lambda: trims.append(time.monotonic()))
    monkeypatch.setattr(heap, "idle_seconds", 0.2)
    ids, limits = translator.encode(["你好。"]), [RowLimits(8)]
    decode_ids(translator, ids, limits, 1)  # its driver goes idle: the timer is armed
    step = StepScheduler.step

    def slow_step(self: StepScheduler) -> object:
        time.sleep(0.05)
        return step(self)

    monkeypatch.setattr(StepScheduler, "step", slow_step)
    started = time.monotonic()
    decode_ids(translator, ids, limits, 1)  # a new driver, busy for longer than the idle time
    ended = time.monotonic()
    assert ended - started > 0.3, "the second decode must outlast the idle time for this to show anything"
    assert [t for t in trims if started <= t <= ended] == [], "trimmed during the second call's decode"
    wait_until(lambda: trims, 5, "a trim once the process has idled")
