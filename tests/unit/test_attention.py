"""Fixed-order attention: every C path gives attend_in_torch's bits (its twin, operation for operation),
on the shapes the decoder and transformers pass, masks, views, NaN and overflowing scores; the twin
stays within float rounding of torch's scaled_dot_product_attention; and transformers' masks reach
the kernel as they mean."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from handlers.model import native
from handlers.model.attention import (
    attend_in_c,
    attend_in_torch,
    exp_in_torch,
    fixed_order_attention,
    select_sets,
    transposed_keys,
)
from tests.kernel_paths import kernel_paths

# (sets, heads, queries, keys, head dim, masked): a decoder step's self- and cross-attention, the
# encoder's many queries, keys from 1 past two vector widths, head dims that are and are not 64.
Shape = tuple[int, int, int, int, int, bool]
SHAPES: list[Shape] = [
    (6, 8, 1, 1, 64, False),
    (5, 8, 1, 7, 64, False),
    (4, 8, 4, 17, 64, True),
    (3, 2, 9, 9, 64, True),
    (2, 3, 2, 33, 20, True),
    (2, 2, 3, 40, 48, False),
    (1, 4, 1, 64, 16, True),
]


@pytest.fixture(scope="module", params=kernel_paths())
def attend_function(request: pytest.FixtureRequest) -> object:
    kernels = native.load(request.param)
    assert kernels is not None and kernels.attend is not None
    return kernels.attend


def case(
    sets: int, heads: int, queries: int, keys: int, dim: int, masked: bool, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(sets, heads, n, dim, generator=generator) for n in (queries, keys, keys))
    if not masked:
        return q, k, v, None
    mask = torch.zeros(sets, 1, keys)
    for s in range(sets):  # a padded width: each set attends to its first few keys only
        mask[s, :, int(torch.randint(1, keys + 1, (1,), generator=generator)) :] = -torch.inf
    return q, k, v, mask


def both(
    function: object, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, twin), each as (sets, queries, heads, dim)."""
    keys_t = transposed_keys(k)
    c = attend_in_c(function, q, keys_t, v, mask, 0.125)  # type: ignore[arg-type]
    return c, attend_in_torch(q, keys_t, v, mask, 0.125).transpose(1, 2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_path_gives_the_twins_bits(attend_function: object, shape: Shape) -> None:
    c, twin = both(attend_function, *case(*shape))
    assert torch.equal(c, twin)


def test_views_masks_per_query_and_unpadded_keys(attend_function: object) -> None:
    """Queries as a strided view (the decoder's beams by sentence), keys not padded (copied to the
    kernel's layout), a mask per query (causal), values a view into a larger cache."""
    q, k, v, _ = case(3, 4, 5, 12, 64, False, seed=3)
    beams_view = q.transpose(1, 2).contiguous().transpose(1, 2)
    cache = torch.randn(3, 4, 32, 64)
    cache[:, :, :12] = v
    causal = torch.zeros(3, 5, 12).masked_fill_(~torch.ones(5, 12, dtype=torch.bool).tril(7), -torch.inf)
    unpadded = k.transpose(2, 3)
    c = attend_in_c(attend_function, beams_view, unpadded, cache[:, :, :12], causal, 0.125)  # type: ignore[arg-type]
    twin = attend_in_torch(q, unpadded, v, causal, 0.125).transpose(1, 2)
    assert torch.equal(c, twin)


def test_nan_and_extreme_scores_agree(attend_function: object) -> None:
    q, k, v, mask = case(4, 2, 2, 20, 64, True, seed=5)
    q[0, 0, 0, 3] = torch.nan  # one NaN query: its outputs are NaN, the others' are not
    q[1] *= 1e4  # scores far apart: the others' exponentials underflow to 0
    q[2] *= 1e-30  # subnormal products
    c, twin = both(attend_function, q, k, v, mask)
    assert torch.equal(c.isnan(), twin.isnan()) and c[0, 0, 0].isnan().all()
    assert torch.equal(torch.nan_to_num(c), torch.nan_to_num(twin))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_twin_is_within_rounding_of_torchs_attention(shape: Shape) -> None:
    q, k, v, mask = case(*shape)
    ours = attend_in_torch(q, transposed_keys(k), v, mask, 0.125)
    torchs = F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else mask[:, None], scale=0.125
    )
    assert torch.allclose(ours, torchs, rtol=1e-5, atol=1e-6)


def test_exp_is_within_two_ulps_of_torchs_and_zero_below_the_cutoff() -> None:
    x = torch.cat([torch.linspace(-87, 0, 200_001), torch.tensor([-87.5, -1e30, -torch.inf])])
    ours, torchs = exp_in_torch(x), torch.exp(x.double())
    inside = x >= -87
    relative = ((ours[inside].double() - torchs[inside]) / torchs[inside]).abs()
    assert relative.max() < 2.5e-7
    assert torch.equal(ours[~inside], torch.zeros(3)) and exp_in_torch(torch.tensor([0.0])).item() == 1.0
    assert exp_in_torch(torch.tensor([torch.nan])).isnan().all()


class Module:
    is_causal = False


@pytest.mark.parametrize("masked", [False, True])
def test_transformers_masks_reach_the_kernel_as_they_mean(masked: bool) -> None:
    """transformers passes a boolean mask (True attends) per batch row and query, or None; a causal
    module with several queries and no mask gets the causal mask (as SDPA's is_causal)."""
    q, k, v, mask = case(3, 4, 6, 6, 64, masked, seed=7)
    expected = F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if mask is None else mask[:, None].isfinite(), scale=0.125
    )
    boolean = None if mask is None else mask[:, None].isfinite().expand(-1, 1, 6, -1)
    got, weights = fixed_order_attention(Module(), q, k, v, boolean, scaling=0.125)
    assert weights is None and torch.allclose(got, expected.transpose(1, 2), rtol=1e-5, atol=1e-6)
    causal = Module()
    causal.is_causal = True
    got, _ = fixed_order_attention(causal, q, k, v, None, scaling=0.125)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125)
    assert torch.allclose(got, expected.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_selected_sets_keep_their_padding() -> None:
    keys_t = transposed_keys(torch.randn(5, 2, 7, 8))
    kept = select_sets(keys_t, torch.tensor([4, 1, 1]))
    assert torch.equal(kept, keys_t[[4, 1, 1]]) and kept.stride(-2) == 16 and kept.stride(-1) == 1
