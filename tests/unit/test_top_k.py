"""The C top-k gives torch.topk's values and indices: itself where no values tie, by handing a row
to torch.topk where a tie or a NaN could make torch.topk's own order of equal values count. Its
k = 1 scan (arg_max, the greedy search's) gives torch.argmax's indices the same way."""

from __future__ import annotations

import pytest
import torch

from handlers.model import native
from handlers.model.top_k import arg_max, top_k
from tests.kernel_paths import kernel_paths


@pytest.fixture(scope="module", params=kernel_paths())
def library(request: pytest.FixtureRequest) -> native.Kernels:
    """One instruction-set path's kernels (each path this CPU runs, in turn)."""
    kernels = native.load(request.param)
    assert kernels is not None
    return kernels


def decided(
    library: native.Kernels, values: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The kernel's own answer, or None where it leaves a row to torch.topk."""
    return decided_rows(library, values, k)[0]


def decided_rows(
    library: native.Kernels, values: torch.Tensor, k: int
) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, torch.Tensor]:
    """The kernel's answer (None if it left any row), and which rows it left to torch.topk."""
    rows = values.reshape(-1, values.shape[-1]).contiguous()
    top, columns = rows.new_empty((rows.shape[0], k)), torch.empty((rows.shape[0], k), dtype=torch.long)
    undecided = torch.zeros(rows.shape[0], dtype=torch.uint8)
    pointers = rows.data_ptr(), rows.shape[0], rows.shape[1], k, top.data_ptr(), columns.data_ptr()
    left = library.top_k_rows(*pointers, undecided.data_ptr())
    assert left == int(undecided.sum())
    return (None if left else (top, columns)), undecided.bool()


def log_probs(*shape: int, seed: int) -> torch.Tensor:
    return torch.log_softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 4, dim=-1)


@pytest.mark.parametrize(
    ("shape", "k"), [((64, 32000), 8), ((16, 4, 32000), 8), ((1, 1, 32000), 2), ((3, 9), 9), ((5, 37), 6)]
)
def test_without_ties_the_kernel_answers_as_torch_topk(
    library: native.Kernels, shape: tuple[int, ...], k: int
) -> None:
    values = log_probs(*shape, seed=sum(shape) + k)
    ours = decided(library, values, k)
    assert ours is not None, "no ties here: the kernel decides"
    expected = torch.topk(values, k, dim=-1)
    assert torch.equal(ours[0], expected.values.reshape(-1, k)) and torch.equal(
        ours[1], expected.indices.reshape(-1, k)
    )
    answer = top_k(values, k)
    assert torch.equal(answer[0], expected.values) and torch.equal(answer[1], expected.indices)


def ties_and_nans() -> list[torch.Tensor]:
    within = log_probs(4, 500, seed=1)
    within[2, 10] = within[2, 11] = within[2].max() + 1  # two equal best values
    boundary = log_probs(4, 500, seed=2)
    kth = torch.topk(boundary[1], 8).values[-1]
    boundary[1, int((boundary[1] < kth).nonzero()[0, 0])] = kth  # one equal to the 8th best
    nan = log_probs(4, 500, seed=3)
    nan[3, 77] = float("nan")
    forced = torch.full((2, 500), float("-inf"))
    forced[:, 0] = 0.0  # a forced eos: every other column at -inf
    zeros = log_probs(2, 500, seed=4)
    zeros[0, 5], zeros[0, 6] = 0.0, -0.0  # equal as floats, different bits
    return [within, boundary, nan, forced, zeros]


# Which rows of ties_and_nans() hold the tie, the NaN or the forced eos.
LEFT = [[2], [1], [3], [0, 1], [0]]


@pytest.mark.parametrize("index", range(5))
def test_a_row_with_a_tie_or_a_nan_is_left_to_torch_topk(library: native.Kernels, index: int) -> None:
    values = ties_and_nans()[index]
    answer, left = decided_rows(library, values, 8)
    assert answer is None and left.nonzero().flatten().tolist() == LEFT[index]
    ours, expected = top_k(values, 8), torch.topk(values, 8, dim=-1)
    assert torch.equal(ours[1], expected.indices)
    assert torch.allclose(ours[0], expected.values, equal_nan=True)


@pytest.mark.parametrize("shape", [(16, 32000), (1, 32000), (4, 2, 32000), (3, 9), (5, 1)])
def test_without_ties_the_k1_scan_answers_as_torch_argmax(
    library: native.Kernels, shape: tuple[int, ...]
) -> None:
    logits = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))) * 8
    ours = decided(library, logits, 1)
    assert ours is not None, "no ties here: the kernel decides"
    expected = logits.argmax(-1)
    assert torch.equal(ours[1].view(expected.shape), expected)
    assert torch.equal(arg_max(logits), expected)


def argmax_edges() -> torch.Tensor:
    """Rows where torch.argmax's rules decide: equal maxima (first wins), NaNs (the first NaN wins),
    all -inf, +0.0 beside -0.0, +inf twice, the maximum last or first, and a constrained greedy row."""
    rows = torch.randn(10, 300, generator=torch.Generator().manual_seed(7))
    rows[0, 40] = rows[0, 200] = 9.0
    rows[1, 50], rows[1, 20] = float("nan"), float("nan")
    rows[2] = float("-inf")
    rows[3] = -1.0
    rows[3, 8], rows[3, 3] = -0.0, 0.0
    rows[4, 100] = rows[4, 7] = float("inf")
    rows[5, -1] = 50.0
    rows[6, 0] = 50.0
    rows[7] = float("-inf")
    rows[7, 123] = 0.0  # a forced eos
    rows[8, 12] = float("nan")
    rows[8, 13] = float("inf")
    return rows


def test_arg_max_gives_torch_argmax_on_ties_nans_and_infinities(library: native.Kernels) -> None:
    rows = argmax_edges()
    assert torch.equal(arg_max(rows), rows.argmax(-1))
    _, left = decided_rows(library, rows, 1)
    assert left.nonzero().flatten().tolist() == [0, 1, 2, 3, 4, 7, 8]  # 7: -inf ties before its 0


def test_arg_max_without_the_library_is_torch_argmax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "current", lambda: None)
    rows = argmax_edges()
    assert torch.equal(arg_max(rows), rows.argmax(-1))
