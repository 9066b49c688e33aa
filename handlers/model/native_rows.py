"""The per-row int8 mapping's element-wise work: one C call each side of the matmul, or torch's ten.

RowInt8Linear maps every input row onto [0, 1] before fbgemm and puts the row's offset and span
back after it (handlers.model.row_int8). In torch that is ten small operator calls per layer, and
a decode step has 37 layers. kernels.c does each side in one pass, with the same IEEE operations
in the same order, so both give the same bits. Alone, it made our engine 3-6% faster in an
in-process A/B (the profiler, which inflates small operators, had promised more). Where the C
kernels are not loaded (handlers.model.native), torch's calls stand in.
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch

from handlers.model import native

# A constant row (span 0) maps to all zeros; the clamp only keeps the division finite.
TINY_SPAN = torch.finfo(torch.float32).tiny


class RowOps(Protocol):
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
        """low * row_sums (+ bias) + product * span, per row; `product` (the matmul's own output,
        not kept by the caller) may be written over."""
        ...


class TorchRowOps:
    """torch's operators: the reference the C kernels must equal, and the fallback."""

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
    """kernels.c's map_rows and restore_rows on one of its paths (handlers.model.native)."""

    def __init__(self, kernels: native.Kernels) -> None:
        self.kernels = kernels
        self._map, self._restore = kernels.map_rows, kernels.restore_rows

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
        self._restore(
            product.data_ptr(),
            rows,
            cols,
            _float_rows(low).data_ptr(),
            _float_rows(span).data_ptr(),
            row_sums.contiguous().data_ptr(),
            None if bias is None else bias.contiguous().data_ptr(),
            product.data_ptr(),  # the output: each element is read, then written, so no second M x N buffer
        )
        return product


def _float_rows(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dtype != torch.float32 or tensor.dim() != 2:
        raise TypeError(f"expected a 2-d float32 tensor, got {tensor.dtype} {tuple(tensor.shape)}")
    return tensor.contiguous()


@functools.cache
def default_row_ops() -> RowOps:
    """This process's kernels (native.current) as row ops, else torch's operators: made once per
    process (a worker's forked partitions inherit it; native.use clears it). Both give the same
    bits, so nothing else depends on which."""
    kernels = native.current()
    return TorchRowOps() if kernels is None else NativeRowOps(kernels)
