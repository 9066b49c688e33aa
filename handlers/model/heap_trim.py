"""Give a batch's memory back to the system once the worker is idle, and keep load-time holes out of the heap.

glibc keeps what a batch frees in its heap for the next one: on the full-size int8 stand-in a
beam-4 batch of 64 sentences left the worker at 532 MB private against 376 MB after load, and
`malloc_trim(0)` brought it back to 376 MB in 14-22 ms. Trimming after every batch would cost
that on every call under load, so it runs once the worker has had no work for `idle_seconds`:
what a batch leaves behind is held only while more work may come.

Loading an int8 model frees about 200 MB of large temporaries (fp32 layers and their copies while
they are quantized and repacked) between the blocks it keeps. In glibc's heap those become holes:
trimmed, they cost nothing while idle, but under load every step's buffers land in one hole or
another, and a step partition re-touched up to 146 MB of them (private, per partition) where fp32's
compact heap grew by 55 MB (a one-off probe of smaps under beam-4 load, AMD EPYC, 2026-11-27).
`allocations_outside_the_heap` gives every large allocation made while loading a mapping of its
own, so what the load frees goes back whole and the heap holds no holes.

glibc only; where the C library has no malloc_trim or mallopt (musl, macOS) this does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading
from collections.abc import Callable, Iterator
from typing import Any

# A request after a trim faults its buffers in again: an 8-sentence text at beam 4 took 223 ms after
# a 2 s pause past a 1 s idle time, 196 ms after 0.3 s (AMD EPYC Zen 4, 2026-11-29, medians of 10,
# bench/results/heap-2026-11-29). Ten seconds: traffic with gaps shorter than that keeps its heap.
IDLE_TRIM_SECONDS = 10.0
# mallopt's parameters (glibc's malloc.h) and the values used while loading and after.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
LOAD_MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, held fixed while loading
# After loading: glibc's ceiling for its own moving threshold, so that a step's buffers (up to a
# 16 MB matrix of logits) come from the heap and are reused there. Setting it stops glibc moving it.
RUNTIME_MMAP_THRESHOLD = 32 * 1024 * 1024
# ...and free() never gives the top of the heap back: only the idle trim does. At glibc's pairing
# (twice the mmap threshold, 64 MB) a decode's heap shrank whenever a cohort's caches were freed and
# was faulted in again by the next. With the one-call drivers' timers (handlers.scheduling.inline),
# 40,000-57,000 page faults per 64 sentences at beam 4 in process; without both, none and 1.08-1.12x
# the sentences/s (AMD EPYC Zen 4, 2026-11-29, docs/INT8.md). The largest value mallopt takes.
RUNTIME_TRIM_THRESHOLD = 2**31 - 1


def _libc_function(name: str, *arguments: type) -> Any:
    """The C library's function `name` with its argument types set, or None where it has none."""
    library = ctypes.util.find_library("c")
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = list(arguments)
    return function


@contextlib.contextmanager
def allocations_outside_the_heap() -> Iterator[None]:
    """While inside: each allocation of 128 KiB or more is a mapping of its own (freed, it is unmapped).

    On leaving, large buffers come from the heap again, as under glibc's defaults once they have
    grown, and the heap is given back only by a trim: the decode's buffers are reused there, not
    mapped, unmapped and faulted in again step after step.
    """
    mallopt = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is None:
        yield
        return
    mallopt(M_MMAP_THRESHOLD, LOAD_MMAP_THRESHOLD)
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, RUNTIME_MMAP_THRESHOLD)
        mallopt(M_TRIM_THRESHOLD, RUNTIME_TRIM_THRESHOLD)


def malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where the C library has none."""
    trim = _libc_function("malloc_trim", ctypes.c_size_t)
    return None if trim is None else lambda: trim(0)


class IdleTrim:
    """`busy()` when work starts, `idle()` when it ends; trims once `idle_seconds` pass without work."""

    def __init__(self, idle_seconds: float, trim: Callable[[], object] | None = None) -> None:
        self.idle_seconds = idle_seconds
        self._trim = trim if trim is not None else malloc_trim()
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.trims = 0

    def busy(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def idle(self) -> None:
        if self._trim is None:
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.idle_seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._timer is None or threading.current_thread() is not self._timer:
                return  # work started (or a newer timer took over) since this one was armed
            self._timer = None
        assert self._trim is not None
        self._trim()
        self.trims += 1
