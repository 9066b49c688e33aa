"""The C kernels for the per-row int8 mapping give torch's operators' results, bit for bit, on every
instruction-set path this CPU runs (tests/kernel_paths.py; how they are built and chosen:
tests/unit/test_native.py).

Inputs include the rows that stress the mapping: constant rows (span 0), one large value among
small ones, subnormals, mixed signs and widths that are no multiple of a vector's lanes.
"""

from __future__ import annotations

import pytest
import torch

from handlers.model import native
from handlers.model.native_rows import TINY_SPAN, NativeRowOps, TorchRowOps
from handlers.model.row_int8 import RowInt8Linear, fuse
from tests.kernel_paths import kernel_paths

SHAPES = [(1, 512, 1536), (64, 512, 512), (64, 2048, 512), (16, 512, 32000), (7, 33, 40), (3, 5, 7)]


@pytest.fixture(scope="module", params=kernel_paths())
def kernels(request: pytest.FixtureRequest) -> NativeRowOps:
    path = native.load(request.param)
    assert path is not None and path.name == request.param
    return NativeRowOps(path)


def hard_rows(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """Random rows, the first few of them hard: constant, one outlier, subnormal, one sign each."""
    x = torch.randn(rows, cols, generator=generator) * 3
    hard = [x[index] for index in range(min(rows, 5))]
    if hard:
        hard[0].fill_(2.5)  # span 0
    if len(hard) > 1:
        hard[1].mul_(1e-3)[cols // 2] = 1e4
    if len(hard) > 2:
        hard[2].mul_(1e-39)
    if len(hard) > 4:
        hard[3].abs_()
        hard[4].abs_().neg_()
    return x


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize(("rows", "cols", "out"), SHAPES)
def test_the_mapping_and_its_inverse_are_torchs(
    kernels: NativeRowOps, rows: int, cols: int, out: int
) -> None:
    generator = torch.Generator().manual_seed(rows * 7919 + cols)
    x = hard_rows(rows, cols, generator)
    ours, theirs = kernels.map_rows(x), TorchRowOps().map_rows(x)
    assert all(same_bits(a, b) for a, b in zip(ours, theirs, strict=True))
    _, low, span = theirs
    assert float(theirs[0].min()) == 0.0 and float(theirs[0].max()) <= 1.0
    product = torch.randn(rows, out, generator=generator) * 50
    row_sums, bias = torch.randn(out, generator=generator), torch.randn(out, generator=generator)
    for given in (bias, None):
        expected = TorchRowOps().restore_rows(product, low, span, row_sums, given)
        assert same_bits(kernels.restore_rows(product.clone(), low, span, row_sums, given), expected)


def test_a_nan_row_stays_nan_and_leaves_the_others_alone(kernels: NativeRowOps) -> None:
    x = torch.randn(3, 64)
    x[1, 5] = float("nan")
    (unit, low, span), (expected, _, _) = kernels.map_rows(x), TorchRowOps().map_rows(x)
    assert bool(unit[1].isnan().all()) and bool(low[1].isnan()) and bool(span[1].isnan())
    assert same_bits(unit[0::2], expected[0::2])


def lane_order_range(row: list[float]) -> tuple[float, float]:
    """kernels.c's row_range_one_chain in Python (row without NaN): eight lanes, lane j meeting columns
    j, j + 8, ... and keeping the first of equal values, the lanes then taken in order, then the tail.
    Only a zero's sign depends on this order (+0.0 and -0.0 compare equal)."""
    whole = len(row) - len(row) % 8
    low, high = [row[0]] * 8, [row[0]] * 8
    for column in range(whole):
        lane, value = column % 8, row[column]
        low[lane] = value if value < low[lane] else low[lane]
        high[lane] = value if value > high[lane] else high[lane]
    least, most = low[0], high[0]
    for value in low[1:] if whole else []:
        least = value if value < least else least
    for value in high[1:] if whole else []:
        most = value if value > most else most
    for value in row[whole:]:
        least = value if value < least else least
        most = value if value > most else most
    return least, most


@pytest.mark.parametrize("cols", [5, 8, 31, 32, 33, 64, 100, 512, 2048])
def test_a_row_whose_least_or_greatest_is_a_zero_keeps_the_lane_orders_sign(
    kernels: NativeRowOps, cols: int
) -> None:
    """row_range runs four chains of compares and gives the one chain's bits; where they could differ
    (an extreme that is a zero, of either sign) it takes the row again in the one chain's order."""
    generator = torch.Generator().manual_seed(cols)
    x = torch.rand(24, cols, generator=generator) + 0.1
    for row in x:
        places = torch.randperm(cols, generator=generator)[:4]
        row[places[:2]], row[places[2:]] = 0.0, -0.0
    x[12:] = -x[12:]  # the greatest a zero
    _, low, span = kernels.map_rows(x)
    for r, row in enumerate(x.tolist()):
        least, most = lane_order_range(row)
        expected_span = max(float(torch.tensor(most) - torch.tensor(least)), TINY_SPAN)
        assert same_bits(low[r], torch.tensor([least])) and same_bits(span[r], torch.tensor([expected_span]))


def test_int8_layers_give_the_same_outputs_on_either_ops(kernels: NativeRowOps) -> None:
    torch.manual_seed(3)
    model = torch.nn.Sequential(*(nn_linear(512, width) for width in (512, 512, 2048)))
    quantized = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
        model, {torch.nn.Linear}, dtype=torch.qint8
    )
    x = hard_rows(12, 512, torch.Generator().manual_seed(5)).reshape(3, 4, 512)
    pairs = [
        (RowInt8Linear(weight, bias, kernels), RowInt8Linear(weight, bias, TorchRowOps()))
        for weight, bias in (module._weight_bias() for module in quantized)
    ]
    ids = torch.tensor([3, 1, 400])
    for fast, slow in pairs:
        assert same_bits(fast(x), slow(x))
        assert same_bits(fast.rows(ids)(x), slow.rows(ids)(x))
    fused, reference = fuse([fast for fast, _ in pairs]), fuse([slow for _, slow in pairs])
    assert fused.ops is kernels
    assert same_bits(fused(x), reference(x))


def nn_linear(inputs: int, outputs: int) -> torch.nn.Linear:
    layer = torch.nn.Linear(inputs, outputs)
    torch.nn.init.normal_(layer.weight, std=0.05)
    return layer
