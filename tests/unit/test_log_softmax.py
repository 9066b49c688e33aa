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
    assert re.search(r"\b1[2-9] passed", done.stdout), done.stdout[-3000:]
