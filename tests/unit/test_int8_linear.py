"""int8_linear (one C call per int8 layer) gives the bits of the fbgemm path it replaces: the mapping
in torch's operators, fbgemm's matmul, the epilogue in torch's operators (TorchRowOps), on every
instruction-set path with an int8 matmul that this CPU runs (AVX2, AVX-VNNI, AVX-512 VNNI:
tests/kernel_paths.py skips, saying why, the ones it lacks)."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from handlers.model import int8_linear, native
from handlers.model.native_rows import NativeRowOps, RowOps, TorchRowOps
from handlers.model.row_int8 import RowInt8Linear, fuse
from tests.kernel_paths import kernel_paths
from tests.unit.test_row_int8_kernels import hard_rows, same_bits


@pytest.fixture(scope="module", params=kernel_paths(int8_matmul=True))
def ops(request: pytest.FixtureRequest) -> RowOps:
    """One path's kernels, named, so its int8_linear holds every layer it fits."""
    kernels = native.load(request.param)
    assert kernels is not None, request.param
    return NativeRowOps(kernels)


# (rows, inputs, outputs): the decoder's layers for one sentence, a beam, a batch and an encoder
# call, the cross-attention keys and values, the tiny stand-in's widths and the output layer.
SHAPES = [
    (1, 512, 1536),
    (4, 512, 512),
    (7, 2048, 512),
    (13, 512, 2048),
    (64, 512, 6144),
    (300, 512, 512),
    (3, 32, 64),
    (16, 512, 32000),  # the output layer, a beam-4 step of 4 sentences
]


def quantized_linear(inputs: int, outputs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_dynamic's qint8 weight and the bias of a random Linear."""
    torch.manual_seed(seed)
    layer = torch.nn.Linear(inputs, outputs)
    torch.nn.init.normal_(layer.weight, std=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            torch.nn.Sequential(layer), {torch.nn.Linear}, dtype=torch.qint8
        )[0]
    weight, bias = quantized._weight_bias()
    return weight, bias


def pair(weight: torch.Tensor, bias: torch.Tensor | None, ops: RowOps) -> tuple[RowInt8Linear, RowInt8Linear]:
    """The same weight as one int8_linear call and through fbgemm with torch's operators around it."""
    ours, theirs = RowInt8Linear(weight, bias, ops), RowInt8Linear(weight, bias, TorchRowOps())
    assert ours.whole is not None and theirs.whole is None
    return ours, theirs


@pytest.mark.parametrize(("rows", "inputs", "outputs"), SHAPES)
def test_a_layer_gives_the_bits_of_fbgemm_between_torchs_operators(
    ops: RowOps, rows: int, inputs: int, outputs: int
) -> None:
    weight, bias = quantized_linear(inputs, outputs, seed=rows)
    x = hard_rows(rows, inputs, torch.Generator().manual_seed(rows + inputs))  # constant, outlier, subnormal
    for given in (bias, None):
        ours, theirs = pair(weight, given, ops)
        with torch.inference_mode():
            assert same_bits(ours(x), theirs(x))


def test_fused_projections_and_cut_output_layers_keep_the_bits(ops: RowOps) -> None:
    layers = [pair(*quantized_linear(512, 512, seed), ops) for seed in range(3)]
    x = hard_rows(9, 512, torch.Generator().manual_seed(9))
    ours, theirs = fuse([a for a, _ in layers]), fuse([b for _, b in layers])  # per-channel scales
    ids = torch.tensor([0, 5, 17, 200, 311, 400, 401, 402, 500, 501, 502, 503, 504, 505, 506, 511])
    with torch.inference_mode():
        assert ours.whole is not None and same_bits(ours(x), theirs(x))
        cut = layers[0][0].rows(ids)
        assert cut.whole is not None and same_bits(cut(x), layers[0][1].rows(ids)(x))


@pytest.mark.parametrize(("rows", "outputs"), [(1, 32000), (16, 32000), (61, 64), (300, 512)])
def test_a_bias_added_after_the_layer_in_its_epilogue_gives_the_bits_of_a_separate_add(
    ops: RowOps, rows: int, outputs: int
) -> None:
    """forward_then_add (the output layer and its final_logits_bias) equals the layer's output plus
    the bias as torch adds it, on the fbgemm path and ours, with and without the layer's own bias, for
    after-values of every kind: large, tiny, zeros of both signs, -inf (the output layer's fillers), NaN."""
    weight, bias = quantized_linear(512, outputs, seed=outputs + rows)
    x = hard_rows(rows, 512, torch.Generator().manual_seed(rows))
    after = torch.randn(outputs, generator=torch.Generator().manual_seed(5)) * 10
    after[:6] = torch.tensor([-torch.inf, 0.0, -0.0, 1e-40, 3e38, torch.nan])
    for given in (None, bias):
        ours, theirs = pair(weight, given, ops)
        with torch.inference_mode():
            expected = theirs(x).add_(after)
            assert same_bits(theirs.forward_then_add(x, after), expected)
            assert same_bits(ours.forward_then_add(x, after), expected)


def test_quantization_rounds_as_fbgemm_at_every_rounding_point(ops: RowOps) -> None:
    """Rows holding 0 and 1 map onto themselves, so these inputs are the quantizer's own: the floats
    nearest each midpoint (q + 1/2) / 127, where rounding up or down decides the int8 value."""
    midpoints = (torch.arange(127, dtype=torch.float64) + 0.5) / 127
    near = [torch.nextafter(midpoints.float(), torch.tensor(sign)) for sign in (0.0, 2.0)]
    values = torch.cat([midpoints.float(), *near, torch.rand(1029)]).clamp(0, 1)
    rows = values.reshape(-1, 30)
    rows[:, 0], rows[:, 1] = 0.0, 1.0
    weight, bias = quantized_linear(32, 64, seed=1)
    # A one-hot weight per input column makes each output a single quantized input times its scale.
    codes = torch.zeros(64, 32, dtype=torch.int8)
    codes[torch.arange(32), torch.arange(32)] = 1
    one_hot = torch._make_per_tensor_quantized_tensor(codes, weight.q_scale(), 0)
    ours, theirs = pair(one_hot, bias, ops)
    with torch.inference_mode():
        assert same_bits(
            ours(torch.nn.functional.pad(rows, (0, 2))), theirs(torch.nn.functional.pad(rows, (0, 2)))
        )


def test_the_weight_comes_back_as_quantize_dynamic_made_it(ops: RowOps) -> None:
    weight, bias = quantized_linear(64, 48, seed=2)
    ours, _ = pair(weight, bias, ops)
    back = ours.weight()
    assert torch.equal(back.int_repr(), weight.int_repr()) and back.q_scale() == weight.q_scale()
    assert ours.packed is None, "one copy of the weights: int8_linear's order only"


def test_shapes_it_does_not_fit_keep_fbgemm(ops: RowOps) -> None:
    weight, bias = quantized_linear(5, 7, seed=3)  # 7 outputs: no multiple of 16
    layer = RowInt8Linear(weight, bias, ops)
    assert layer.whole is None and layer.packed is not None
    shifted = torch._make_per_tensor_quantized_tensor(torch.zeros(16, 4, dtype=torch.int8), 0.1, 3)
    assert not int8_linear.fits(shifted), "a zero point: fbgemm subtracts offsets int8_linear does not"


def test_the_reused_scratch_keeps_the_bits_across_sizes_and_threads(ops: RowOps) -> None:
    """The quantized rows and ranges live in one buffer per thread, reused call after call: a small
    call after a large one, a call beyond what is kept, and two threads at once all keep fbgemm's bits."""
    ours, theirs = pair(*quantized_linear(512, 512, seed=4), ops)
    kept = int8_linear.KEPT_SCRATCH // 512 + 1  # rows whose scratch is not kept past the call
    batches = [hard_rows(rows, 512, torch.Generator().manual_seed(rows)) for rows in (64, kept, 3, 1, 64)]
    with torch.inference_mode():
        expected = [theirs(x) for x in batches]
        assert all(same_bits(ours(x), want) for x, want in zip(batches, expected, strict=True))
        assert int8_linear._SCRATCH.buffer.numel() <= int8_linear.KEPT_SCRATCH
        # Leading dimensions pass through, as nn.Linear's do.
        assert same_bits(ours(batches[0].view(8, 8, 512)), expected[0].view(8, 8, 512))

    def run(order: list[int]) -> bool:
        with torch.inference_mode():
            return all(same_bits(ours(batches[i]), expected[i]) for _ in range(20) for i in order)

    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(run, [[0, 2, 3], [3, 0, 2]]))
