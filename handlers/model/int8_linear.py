"""A per-row int8 layer in one C call (kernels.c's int8_linear), where fbgemm took three and its own overhead.

RowInt8Linear maps each row onto [0, 1], lets fbgemm quantize it and multiply, and puts the row's
offset and span back (handlers.model.row_int8). fbgemm's call costs about 17 us however small the
matrix: for one sentence, most of a decode step's 37 matmuls are that fixed cost. int8_linear maps,
quantizes, multiplies in int32 and applies the epilogue in one pass each, with fbgemm's arithmetic
(quantize by the reciprocal of 1/127, dequantize by one product of the two scales per column) and
restore_rows's after it, so every output has the bits the fbgemm path gives
(tests/unit/test_int8_linear.py). The weights are held only in its own order: an int8 worker keeps
one copy, as before.

It stands in for fbgemm only where its bits are fbgemm's: the fbgemm (or x86) engine, weights with
zero point 0 (quantize_dynamic's symmetric qint8), N a multiple of 16 and K of 4 (every layer of
opus-mt-zh-en and the tiny stand-in), and a
kernel path with an int8 matmul (AVX2 and up) that is faster than fbgemm's on this CPU
(native.matmuls_are_ours). Elsewhere RowInt8Linear keeps fbgemm.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

# fbgemm quantizes by the reciprocal of the scale it is told, computed in float: 1 / float(1/127).
UNIT_SCALE = torch.tensor(1 / 127, dtype=torch.float32)
INVERSE = float(torch.tensor(1.0) / UNIT_SCALE)
COLUMNS, INPUTS = 16, 4  # the kernel's block of output columns, and of inputs per 32-bit lane
# Every width, the 32,000-column output layer included: with a tile of 5 rows x 16 columns int8_linear
# ran it at 1.14-1.53x fbgemm's speed from 4 to 64 rows, 0.88-0.90x at one row (AMD EPYC Zen 3,
# 2026-11-28, bench/results/kernels-2026-11-28/tile-study). The tile of 6 rows x 8 columns before it had
# run it at 0.96-0.99x, so the output layer had stayed on fbgemm (at most 8,192 columns, until 96674ee).


class Int8Linear:
    """A qint8 weight in int8_linear's order, with what the kernel needs to give fbgemm's bits."""

    def __init__(self, weight: torch.Tensor, run: Callable[..., Any]) -> None:
        self.out_features, self.in_features = weight.shape
        self.per_channel = weight.qscheme() != torch.per_tensor_affine
        if self.per_channel:
            self.scales = weight.q_per_channel_scales()
            scales = self.scales.to(torch.float32)
        else:
            self.scales = torch.tensor(weight.q_scale(), dtype=torch.float64)
            scales = self.scales.to(torch.float32).expand(self.out_features)
        # fbgemm's dequantization multiplier: the two scales' float product, one per column.
        self.multiplier = (UNIT_SCALE * scales).contiguous()
        self.codes = pack(weight.int_repr())
        self._run = run
        # Addresses of the tensors it owns, taken once: they never move or change.
        self._codes, self._multiplier = self.codes.data_ptr(), self.multiplier.data_ptr()

    def weight(self) -> torch.Tensor:
        """The qint8 weight (out_features x in_features) it was made from."""
        codes = unpack(self.codes, self.out_features, self.in_features)
        if self.per_channel:
            zero_points = torch.zeros(self.out_features, dtype=torch.long)
            return torch._make_per_channel_quantized_tensor(codes, self.scales, zero_points, 0)
        return torch._make_per_tensor_quantized_tensor(codes, float(self.scales), 0)

    def __call__(
        self,
        x: torch.Tensor,
        row_sums: torch.Tensor,
        bias: torch.Tensor | None,
        after: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (..., in_features) float32 -> (..., out_features): any leading shape, as nn.Linear takes.
        `after` (out_features floats) is added to the output as `out.add_(after)` would add it."""
        if x.dtype != torch.float32:
            raise TypeError(f"expected float32 rows, got {x.dtype}")
        x = x.contiguous()
        rows = x.numel() // self.in_features
        out = torch.empty((*x.shape[:-1], self.out_features))
        _held, q, low, span = _SCRATCH.take(rows, self.in_features)  # _held: alive until the kernel returns
        self._run(
            x.data_ptr(),
            rows,
            self.in_features,
            self._codes,
            self.out_features,
            self._multiplier,
            row_sums.data_ptr(),
            None if bias is None else bias.data_ptr(),
            None if after is None else after.data_ptr(),
            INVERSE,
            q,
            low,
            span,
            out.data_ptr(),
        )
        return out


class _Scratch(threading.local):
    """The kernel's scratch, one buffer per thread, reused: the quantized rows, then each row's low and
    span. Allocating the three per call cost about 9 us of a call's ~20 us of Python, 37 calls a decode
    step. The kernel writes every byte of it before reading it. Held up to KEPT_SCRATCH bytes (a step of
    64 rows through fc2 needs 128 KiB); a longer encoder batch gets a buffer for its call only."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)

    def take(self, rows: int, cols: int) -> tuple[torch.Tensor, int, int, int]:
        """A buffer to hold during the call, and the addresses of q (rows x cols bytes), low and span
        (rows floats each, low 64-byte aligned)."""
        ranges = (rows * cols + 63) // 64 * 64
        needed = ranges + 8 * rows
        buffer = self.buffer
        if needed > buffer.numel():
            buffer = torch.empty(needed, dtype=torch.uint8)
            if needed <= KEPT_SCRATCH:
                self.buffer = buffer
        address = buffer.data_ptr()
        return buffer, address, address + ranges, address + ranges + 4 * rows


KEPT_SCRATCH = 4 << 20
_SCRATCH = _Scratch()


def pack(codes: torch.Tensor) -> torch.Tensor:
    """int8 (N x K) -> int8_linear's order: [N/16][K/4][16][4], a block of 16 columns one stream."""
    n, k = codes.shape
    return codes.reshape(n // COLUMNS, COLUMNS, k // INPUTS, INPUTS).permute(0, 2, 1, 3).contiguous()


def unpack(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    return packed.permute(0, 2, 1, 3).reshape(n, k).contiguous()


def fits(weight: torch.Tensor) -> bool:
    """Whether int8_linear gives this weight fbgemm's bits (see the module's docstring)."""
    if torch.backends.quantized.engine not in ("fbgemm", "x86") or weight.dtype != torch.qint8:
        return False
    n, k = weight.shape
    if n % COLUMNS or k % INPUTS:
        return False
    if weight.qscheme() == torch.per_tensor_affine:
        return bool(weight.q_zero_point() == 0)
    return bool((weight.q_per_channel_zero_points() == 0).all())
