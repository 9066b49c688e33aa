"""Per-row int8: a row's output never depends on its call, fusing changes no bit, weights stay close."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from handlers.model.native_rows import RowOps, TorchRowOps
from handlers.model.projections import Projections
from handlers.model.row_int8 import RowInt8Embedding, RowInt8Linear, dynamic_product, fuse, unit_scale_product


def row_int8(in_features: int, out_features: int, ops: RowOps | None = None) -> RowInt8Linear:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            nn.Sequential(nn.Linear(in_features, out_features)), {nn.Linear}, dtype=torch.qint8
        )[0]
    weight, bias = quantized._weight_bias()
    return RowInt8Linear(weight, bias, ops)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(0)


def test_each_row_gives_the_same_bits_alone_and_beside_rows_of_any_scale() -> None:
    layer = row_int8(64, 48)
    x = torch.randn(33, 64) * torch.logspace(-4, 4, 33)[:, None]
    x[5] = 0.25  # a constant row: span 0, handled without a division by zero
    with torch.inference_mode():
        together = layer(x)
        assert all(torch.equal(layer(x[i : i + 1])[0], together[i]) for i in range(33))
        assert torch.isfinite(together).all()


def test_rows_are_no_worse_than_one_range_for_the_whole_call() -> None:
    layer = row_int8(64, 48)
    weight = layer.weight().dequantize()
    x = torch.randn(8, 64) * torch.logspace(-3, 1, 8)[:, None]  # small rows beside large ones
    with torch.inference_mode():
        reference = x @ weight.t() + layer.bias
        error = (layer(x) - reference).abs().amax(dim=-1) / reference.abs().amax(dim=-1)
    assert float(error.max()) < 0.05  # each row on its own grid: the 1e-3 row is as good as the 10 one


def test_fused_layers_give_each_layers_own_output_bit_for_bit() -> None:
    parts = [row_int8(64, width) for width in (64, 32, 16)]
    x = torch.randn(7, 3, 64)
    with torch.inference_mode():
        joined = fuse(parts)(x)
        assert torch.equal(joined, torch.cat([part(x) for part in parts], dim=-1))
        assert [torch.equal(a, part(x)) for a, part in zip(Projections(parts)(x), parts, strict=True)] == [
            True
        ] * 3


def test_fp32_projections_are_the_modules_own() -> None:
    layers = [nn.Linear(16, 8), nn.Linear(16, 4)]
    x = torch.randn(5, 16)
    with torch.inference_mode():
        assert all(
            torch.equal(out, layer(x)) for out, layer in zip(Projections(layers)(x), layers, strict=True)
        )


def test_int8_embedding_keeps_each_row_within_half_a_step_of_its_own_scale() -> None:
    weight = torch.randn(100, 16) * torch.logspace(-2, 2, 100)[:, None]
    table = RowInt8Embedding(weight)
    ids = torch.tensor([[0, 99, 42]])
    looked_up = table(ids)
    step = weight[ids].abs().amax(dim=-1, keepdim=True) / 127
    assert looked_up.dtype == torch.float32 and bool(
        ((looked_up - weight[ids]).abs() <= step / 2 + 1e-9).all()
    )


@pytest.mark.parametrize(
    ("rows", "inputs", "outputs"), [(1, 512, 1536), (64, 512, 32000), (64, 2048, 512), (7, 5, 3)]
)
def test_the_matmul_told_the_unit_scale_gives_the_bits_of_the_one_that_finds_it(
    rows: int, inputs: int, outputs: int
) -> None:
    layer = row_int8(inputs, outputs, TorchRowOps())  # fbgemm's packing, not int8_linear's
    assert layer.product is unit_scale_product, "fbgemm: the call that skips the min/max pass"
    x = torch.randn(rows, inputs) * torch.logspace(-3, 3, rows)[:, None]
    x[0] = 0.5  # a constant row maps to zeros
    unit = TorchRowOps().map_rows(x)[0]
    assert torch.equal(unit_scale_product(unit, layer.packed), dynamic_product(unit, layer.packed))
    constant = TorchRowOps().map_rows(torch.full((3, inputs), 2.0))[0]  # every row: fbgemm finds max 0
    assert torch.equal(unit_scale_product(constant, layer.packed), dynamic_product(constant, layer.packed))
