"""The per-row int8 mapping's element-wise work: one C call each side of the matmul, or torch's ten.

RowInt8Linear maps every input row onto [0, 1] before fbgemm and puts the row's offset and span
back after it (handlers.model.row_int8). In torch that is ten small operator calls per layer, and
a decode step has 37 layers. row_int8_kernels.c does each side in one pass, with the same IEEE
operations in the same order, so both give the same bits; it made our engine 3-6% faster
(python -m bench.row_ops; the profiler, which inflates small operators, had promised more).
The C side is built with the machine's C compiler at first use and cached per source, flags and
CPU. Without a compiler (the slim image) torch's calls stand in, and a warning says so.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

import torch

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("row_int8_kernels.c")
# -ffp-contract=off: a fused multiply-add only where the source asks for one (fmaf), as torch does.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")
# A constant row (span 0) maps to all zeros; the clamp only keeps the division finite.
TINY_SPAN = torch.finfo(torch.float32).tiny


class RowOps(Protocol):
    name: str

    def map_rows(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(unit, low, span) for rows x in `flat`: low = min, span = max - min, unit = (x - low) / span."""
        ...

    def restore_rows(
        self,
        product: torch.Tensor,
        low: torch.Tensor,
        span: torch.Tensor,
        row_sums: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        """low * row_sums (+ bias) + product * span, per row."""
        ...


class TorchRowOps:
    """torch's operators: the reference the C kernels must equal, and the fallback."""

    name = "torch"

    def map_rows(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # amax and amin, not aminmax: its last-dim reduction is not vectorized (10x slower at 64 rows).
        low, high = flat.amin(dim=-1, keepdim=True), flat.amax(dim=-1, keepdim=True)
        span = (high - low).clamp_min_(TINY_SPAN)
        return (flat - low).div_(span), low, span  # x = high gives (high - low) / (high - low): exactly 1

    def restore_rows(
        self,
        product: torch.Tensor,
        low: torch.Tensor,
        span: torch.Tensor,
        row_sums: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        # In place on one M x N buffer: a broadcasting addcmul into a new tensor took 10x longer.
        out = torch.mul(low, row_sums)
        if bias is not None:
            out.add_(bias)
        return out.addcmul_(product, span)


class NativeRowOps:
    """row_int8_kernels.c through ctypes (which lets go of the GIL during the call)."""

    name = "native"

    def __init__(self, library: Path) -> None:
        self._library = ctypes.CDLL(str(library))
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._map = self._library.map_rows
        self._map.argtypes = [pointer, size, size, pointer, pointer, pointer]
        self._map.restype = None
        self._restore = self._library.restore_rows
        self._restore.argtypes = [pointer, size, size, pointer, pointer, pointer, pointer, pointer]
        self._restore.restype = None

    def map_rows(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        flat = _float_rows(flat)
        rows, cols = flat.shape
        unit = torch.empty_like(flat)
        low, span = flat.new_empty((rows, 1)), flat.new_empty((rows, 1))
        self._map(flat.data_ptr(), rows, cols, unit.data_ptr(), low.data_ptr(), span.data_ptr())
        return unit, low, span

    def restore_rows(
        self,
        product: torch.Tensor,
        low: torch.Tensor,
        span: torch.Tensor,
        row_sums: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        product = _float_rows(product)
        rows, cols = product.shape
        out = torch.empty_like(product)
        self._restore(
            product.data_ptr(),
            rows,
            cols,
            _float_rows(low).data_ptr(),
            _float_rows(span).data_ptr(),
            row_sums.contiguous().data_ptr(),
            None if bias is None else bias.contiguous().data_ptr(),
            out.data_ptr(),
        )
        return out


def _float_rows(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype != torch.float32 or tensor.dim() != 2:
        raise TypeError(f"expected a 2-d float32 tensor, got {tensor.dtype} {tuple(tensor.shape)}")
    return tensor.contiguous()


def build(cache: Path | None = None) -> Path:
    """The compiled kernels for this source, flags and CPU: built once, then found in the cache."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc or gcc) on PATH")
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + _cpu().encode()).hexdigest()[:16]
    directory = cache or _cache_dir()
    library = directory / f"row_int8_kernels-{key}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    # Workers may build at once: each writes its own file and renames it into place.
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".so", delete=False) as partial:
        pass
    try:
        subprocess.run(
            [compiler, *FLAGS, "-o", partial.name, str(SOURCE), "-lm"],
            check=True,
            capture_output=True,
            timeout=120,
            text=True,
        )
        os.replace(partial.name, library)
    finally:
        Path(partial.name).unlink(missing_ok=True)
    return library


def load(choice: str = "auto") -> RowOps:
    """`native` (the C kernels, or an error), `torch`, or `auto`: native where it builds, else torch."""
    if choice == "torch":
        return TorchRowOps()
    try:
        return NativeRowOps(build())
    except (OSError, subprocess.SubprocessError) as error:
        if choice == "native":
            raise
        detail = error.stderr if isinstance(error, subprocess.CalledProcessError) else error
        logger.warning(
            "per-row int8 kernels not built (%s): torch's operators stand in, same results", detail
        )
        return TorchRowOps()


@functools.cache
def default_row_ops() -> RowOps:
    """The C kernels where they build, else torch's operators: made once per process (a worker's
    forked partitions inherit it). Both give the same bits, so nothing else depends on which."""
    return load("auto")


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(root) / "zh_en" / "native"


def _cpu() -> str:
    """What -march=native compiled for: the CPU's model and feature flags (a cache shared across hosts)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(wanted)))
