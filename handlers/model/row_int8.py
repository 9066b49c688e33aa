"""int8 layers whose output for one row never depends on the other rows of its call.

torch's dynamic int8 Linear (fbgemm) quantizes its whole input with one scale and zero point,
taken from the input's min and max: a sentence's activations are rounded on a grid set by
whatever else shares the call, so its translation depends on its batch. CTranslate2 gives every
row its own scale. fbgemm has no per-row activation kernel, but its per-tensor range is just
the input's min and max, so we make that range the same for every call: each row is mapped
affinely onto exactly [0, 1] (its min to 0 and its max to 1, both exact in floating point),
fbgemm then always picks scale 1/127 and zero point 0, and the row's own offset and span are
put back after the int32 product:

    W x = span * (W u) + lo * (W 1),   u = (x - lo) / span

The int32 accumulation is exact and every other operation is per element, so a row's output is
the same bit for bit alone, in a batch of 16 or beside a 500-token document. Each row keeps
its own asymmetric 7-bit grid (fbgemm's reduce_range on x86), as fine as the per-tensor grid was
for the row that set it. Weights stay the int8 tensors quantize_dynamic made; the int8 kernel study
(bench/studies/README.md) chose this over torch._int_mm and int8 weight-only kernels. The
element-wise work on either side of the matmul runs in one C call each where a compiler built
them, in torch's operators otherwise: the same bits either way (handlers.model.native_rows).
Where the C kernels' path holds int8_linear (AVX2 and up, where it beats fbgemm on the CPU), the
mapping, the matmul and the epilogue are one C call with fbgemm's bits (handlers.model.int8_linear),
and fbgemm is not called at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from handlers.model.int8_linear import Int8Linear, fits
from handlers.model.native_rows import TINY_SPAN, NativeRowOps, RowOps, default_row_ops

# What fbgemm's dynamic matmul picks for a row mapped onto [0, 1] with reduce_range (7 bits: 0..127).
UNIT_SCALE, UNIT_ZERO_POINT = 1 / 127, 0


def _entry(overload: Any) -> Callable[..., torch.Tensor]:
    """An operator overload's C++ entry point. Calling the overload itself first scans every argument
    for a FakeScriptObject (torch.compile and export trace through the packed weights), about 6 us a
    call at 37 calls a decode step; eager decoding never holds one. The same kernel runs either way."""
    entry: Callable[..., torch.Tensor] = overload._op
    return entry


_LINEAR_DYNAMIC = _entry(torch.ops.quantized.linear_dynamic.default)
_LINEAR_GIVEN_SCALE = _entry(torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32.default)


def dynamic_product(unit: torch.Tensor, packed: Any) -> torch.Tensor:
    """fbgemm's dynamic int8 matmul: it finds the input's min and max itself, then quantizes."""
    return _LINEAR_DYNAMIC(unit, packed, True)


def unit_scale_product(unit: torch.Tensor, packed: Any) -> torch.Tensor:
    """The same matmul told the scale it would find (every row spans [0, 1]): no min/max pass, and
    the same bits (tests/unit/test_row_int8.py); 2-8% faster at the decoder's shapes."""
    return _LINEAR_GIVEN_SCALE(unit, UNIT_SCALE, UNIT_ZERO_POINT, packed)


class RowInt8Linear(nn.Module):
    """A qint8 weight applied with one activation range per input row: in one C call where
    handlers.model.int8_linear gives fbgemm's bits, else through fbgemm with the mapping around it."""

    row_sums: torch.Tensor
    bias: torch.Tensor

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, ops: RowOps | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("row_sums", weight.dequantize().sum(dim=1), persistent=False)
        self.has_bias = bias is not None
        zeros = torch.zeros(self.out_features)
        self.register_buffer("bias", zeros if bias is None else bias.detach().clone(), persistent=False)
        self.use(weight, ops or default_row_ops())

    def use(self, weight: torch.Tensor, ops: RowOps) -> None:
        """Hold `weight` for `ops` (the mapping's element-wise work: C kernels or torch's).

        With the C kernels, a weight int8_linear fits is held in its order and the whole layer is one
        call; otherwise fbgemm's (or oneDNN's) packing. Either way, one copy and the same bits.
        """
        self.ops = ops
        # The path's int8_linear, None where fbgemm holds the matmuls on this CPU (native.matmuls_are_ours).
        run = ops.kernels.int8_linear if isinstance(ops, NativeRowOps) else None
        # The whole layer as one int8_linear call, or None: fbgemm with the mapping around it.
        self.whole = Int8Linear(weight, run) if run is not None and fits(weight) else None
        self.packed = None if self.whole is not None else torch.ops.quantized.linear_prepack(weight, None)
        # fbgemm's packed weights (engines fbgemm and x86) take the scale given; oneDNN's have no such call.
        fbgemm = torch.backends.quantized.engine in ("fbgemm", "x86")
        self.product: Callable[[torch.Tensor, Any], torch.Tensor] = (
            unit_scale_product if fbgemm else dynamic_product
        )

    @classmethod
    def of(cls, module: DynamicQuantizedLinear) -> RowInt8Linear:
        weight, bias = module._weight_bias()  # type: ignore[no-untyped-call]
        return cls(weight, bias)

    def weight(self) -> torch.Tensor:
        """The qint8 weight (out_features x in_features), as quantize_dynamic made it."""
        if self.whole is not None:
            return self.whole.weight()
        weight: torch.Tensor = torch.ops.quantized.linear_unpack(self.packed)[0]
        return weight

    def rows(self, ids: torch.Tensor) -> RowInt8Linear:
        """The same layer cut to the output rows `ids` (their int8 values and scale unchanged)."""
        weight = self.weight()
        if weight.qscheme() != torch.per_tensor_affine:  # a fused layer is per channel
            raise ValueError(f"expected a per-tensor qint8 weight, got {weight.qscheme()}")
        kept = torch._make_per_tensor_quantized_tensor(
            weight.int_repr()[ids].contiguous(), weight.q_scale(), weight.q_zero_point()
        )
        return RowInt8Linear(kept, self.bias[ids] if self.has_bias else None, self.ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The buffers straight from their dict: nn.Module's attribute fallback costs a microsecond
        # each, 74 times a step. No bias (the output layer) adds nothing: x + 0 == x, so skipping
        # the add changes no value.
        buffers = self._buffers
        row_sums, bias = buffers["row_sums"], buffers["bias"] if self.has_bias else None
        if self.whole is not None:
            return self.whole(x, row_sums, bias)  # type: ignore[arg-type]
        flat = x.reshape(-1, self.in_features)
        unit, low, span = self.ops.map_rows(flat)
        product = self.product(unit, self.packed)
        out = self.ops.restore_rows(product, low, span, row_sums, bias)  # type: ignore[arg-type]
        return out.view(*x.shape[:-1], self.out_features)

    def forward_then_add(self, x: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """self(x).add_(after), bit for bit; in int8_linear's epilogue where it holds the layer, which
        saves a pass over the output (the 64 x 32,000 logits of a beam-4 step)."""
        if self.whole is not None:
            buffers = self._buffers
            bias = buffers["bias"] if self.has_bias else None
            return self.whole(x, buffers["row_sums"], bias, after)  # type: ignore[arg-type]
        out: torch.Tensor = self(x)
        return out.add_(after)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, activations=per-row"


def fuse(parts: Sequence[RowInt8Linear]) -> RowInt8Linear:
    """One layer for several projections of the same input, outputs side by side.

    Each part keeps its own int8 codes and scale (as one per-output-channel weight), and a row is
    mapped once for all of them, so every output equals the part's own, bit for bit, in one call.
    """
    weights = [part.weight() for part in parts]
    if any(weight.qscheme() != torch.per_tensor_affine for weight in weights):
        raise ValueError("fuse takes per-tensor qint8 layers, as quantize_dynamic makes them")
    scales = torch.cat([torch.full((w.shape[0],), w.q_scale(), dtype=torch.float64) for w in weights])
    zero_points = torch.cat([torch.full((w.shape[0],), w.q_zero_point(), dtype=torch.int64) for w in weights])
    codes = torch.cat([weight.int_repr() for weight in weights])
    joined = torch._make_per_channel_quantized_tensor(codes, scales, zero_points, 0)
    biased = any(part.has_bias for part in parts)
    return RowInt8Linear(joined, torch.cat([part.bias for part in parts]) if biased else None, parts[0].ops)


class RowInt8Embedding(nn.Module):
    """Weight-only int8 embedding: one symmetric scale per vocabulary row, looked up as fp32.

    The tied 65,001 x 512 table is a third of the model; kept in fp32 it made an int8 worker
    heavier than the unquantized linears it saved.
    """

    codes: torch.Tensor
    scales: torch.Tensor

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        scales = weight.detach().abs().amax(dim=1, keepdim=True).clamp_min(TINY_SPAN) / 127
        self.register_buffer("codes", torch.round(weight.detach() / scales).to(torch.int8), persistent=False)
        self.register_buffer("scales", scales, persistent=False)
        self.num_embeddings, self.embedding_dim = weight.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.codes[ids].to(torch.float32) * self.scales[ids]

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, weights=int8 per row"
