"""kernels.c's log_softmax_top_k_rows gives torch's log_softmax bit for bit (the same vector width,
order of operations and Sleef functions as torch's own kernel on this CPU), then the top-k torch.topk
gives: on every path whose width is torch's here; a path of another width leaves it to torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from handlers.model import native
from handlers.model.top_k import log_softmax_top_k, top_k
from tests.kernel_paths import kernel_paths
from tests.unit.test_row_int8_kernels import same_bits

TORCH_LANES = native.TORCH_LANES.get(torch.backends.cpu.get_cpu_capability(), 0)


@pytest.fixture(scope="module", params=kernel_paths())
def kernels(request: pytest.FixtureRequest) -> Iterator[native.Kernels]:
    """One path's kernels, made this process's (log_softmax_top_k asks native.current())."""
    loaded = native.use(request.param)
    assert loaded is not None
    if loaded.log_softmax_top_k_rows is None:
        lanes = int(getattr(native.open_library(), f"log_softmax_lanes_{request.param}")())
        torchs = f"torch's log_softmax {TORCH_LANES} on this CPU"
        pytest.skip(f"{request.param} runs {lanes or 'no'} floats a vector, {torchs}")
    yield loaded
    native.use("auto")


def hard_logits(rows: int, width: int, seed: int) -> torch.Tensor:
    """Random logits, the first rows hard: huge, tiny, signed zeros, infinities, a NaN, constant."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(max(rows, 8), width, generator=generator) * 4
    x[0].mul_(1e30)
    x[1].mul_(1e-40)
    x[2] = torch.where(torch.rand(width, generator=generator) < 0.5, 0.0, -0.0)
    x[3, ::3] = -torch.inf
    x[4, width // 2] = torch.inf
    x[5, width - 1] = torch.nan
    x[6] = -3.25
    x[7] = -torch.inf
    return x[:rows].contiguous()


@pytest.mark.parametrize("width", [16, 17, 23, 31, 32, 100, 4099, 32000])
def test_the_log_probabilities_are_torchs_bit_for_bit(kernels: native.Kernels, width: int) -> None:
    logits = hard_logits(12, width, seed=width)
    expected = torch.log_softmax(logits, dim=-1)
    k = min(8, width)
    log_probs, _, _ = log_softmax_top_k(logits.clone(), k, torch.full((12,), -1))
    assert same_bits(log_probs, expected)


@pytest.mark.parametrize(("rows", "width", "k"), [(64, 32000, 8), (5, 37, 6), (3, 16, 16), (1, 32000, 2)])
def test_the_best_of_each_row_are_those_of_torch_after_the_ban(
    kernels: native.Kernels, rows: int, width: int, k: int
) -> None:
    logits = hard_logits(rows, width, seed=rows + width)
    logits[:8] = torch.randn(min(rows, 8), width, generator=torch.Generator().manual_seed(1))  # no NaN rows
    banned = torch.tensor([(r * 7) % width if r % 2 else -1 for r in range(rows)])
    expected = torch.log_softmax(logits, dim=-1)
    hit = (banned >= 0).nonzero().flatten()
    expected[hit, banned[hit]] = -torch.inf
    want_top, want_columns = top_k(expected, k)  # torch.topk's answer (see test_top_k.py)
    log_probs, best, columns = log_softmax_top_k(logits.clone(), k, banned)
    assert same_bits(log_probs, expected)
    assert same_bits(best, want_top) and torch.equal(columns, want_columns)


def test_a_path_of_another_width_than_torchs_leaves_log_softmax_to_torch() -> None:
    assert native.torch_vector_math(0) is None
    other = {16: 8, 8: 16}.get(TORCH_LANES, 8)
    assert native.torch_vector_math(other) is None, "a width torch's kernel does not run here"
    if TORCH_LANES:
        assert native.torch_vector_math(TORCH_LANES) is not None


@pytest.mark.skipif(
    TORCH_LANES != 16 or "avx2" not in native.cpu_features(native.open_library()),
    reason="the 8-float width is tested in-process on hosts where torch runs AVX2 itself",
)
def test_the_8_float_width_is_torchs_where_torch_is_told_to_run_avx2() -> None:
    """On an AVX-512 host torch can be made to run its AVX2 kernels (ATEN_CPU_CAPABILITY): the avx2
    path's 8-float log-softmax is then compared with torch's in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not 8_float"],
        env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    # torch ran AVX2 there (the generic path says so as it skips), and the avx2 path's cases passed.
    assert "generic runs no floats a vector, torch's log_softmax 8" in done.stdout, done.stdout[-3000:]
    assert re.search(r"\b([2-9]\d|1[2-9]) passed", done.stdout), done.stdout[-3000:]


def tied_logits(width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits whose log-probabilities tie where top_k_row looks (log-softmax shifts a row, so equal
    logits are equal log-probabilities), and each row's banned column (-1: none)."""
    x = torch.randn(9, width, generator=torch.Generator().manual_seed(width)) * 4
    x[1, 10] = x[1, width - 1] = x[1].max() + 1  # two equal best values, one in the tail
    kth = torch.topk(x[2], 8).values[-1]
    x[2, int((x[2] < kth).nonzero()[-1, 0])] = kth  # one equal to the 8th best, late in the row
    x[3, width // 3] = torch.nan
    x[4, :8] = 50.0  # the first vector's lanes tie while the list fills
    x[5] = 1.5  # constant
    x[6, 3], x[6, 4] = 0.0, -0.0  # equal as floats, different bits
    x[6, 3:5] += x[6].max() + 1
    x[7, 0] = x[7].max() + 2  # the best at column 0, then banned
    banned = torch.tensor([-1, -1, -1, -1, 7, -1, -1, 0, width - 1])
    return x, banned


@pytest.mark.parametrize("width", [16, 23, 37, 500, 32000])
def test_the_scan_in_the_log_softmax_pass_leaves_the_rows_top_k_rows_leaves(
    kernels: native.Kernels, width: int
) -> None:
    """The top-k scanned while the log-probabilities are written decides, and leaves to torch.topk,
    exactly the rows the separate scan (top_k_rows) does on the same log-probabilities, with its answers."""
    logits, banned = tied_logits(width)
    k = 8
    expected = torch.log_softmax(logits, dim=-1)
    hit = (banned >= 0).nonzero().flatten()
    expected[hit, banned[hit]] = -torch.inf
    rows = logits.shape[0]
    want_top, want_columns = expected.new_empty((rows, k)), torch.empty((rows, k), dtype=torch.long)
    want_left = torch.zeros(rows, dtype=torch.uint8)
    kernels.top_k_rows(
        expected.data_ptr(),
        rows,
        width,
        k,
        want_top.data_ptr(),
        want_columns.data_ptr(),
        want_left.data_ptr(),
    )
    assert kernels.log_softmax_top_k_rows is not None and kernels.vector_math
    values = logits.clone()
    top, columns = values.new_empty((rows, k)), torch.empty((rows, k), dtype=torch.long)
    left = torch.zeros(rows, dtype=torch.uint8)
    pointers = (values.data_ptr(), rows, width, k, banned.data_ptr(), *kernels.vector_math)
    assert kernels.log_softmax_top_k_rows(
        *pointers, top.data_ptr(), columns.data_ptr(), left.data_ptr()
    ) == int(left.sum())
    assert same_bits(values, expected)
    assert torch.equal(left, want_left)
    assert {1, 2, 3, 5} <= set(left.nonzero().flatten().tolist())  # the ties, the NaN and the constant row
    decided = left == 0
    assert same_bits(top[decided], want_top[decided]) and torch.equal(columns[decided], want_columns[decided])
    answer = log_softmax_top_k(logits.clone(), k, banned)
    reference = torch.topk(expected, k, dim=-1)
    assert torch.equal(answer[2], reference.indices)
