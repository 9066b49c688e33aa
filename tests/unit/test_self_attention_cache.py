"""A beam search's in-place reorder leaves every layer's cache as copying the rows kept would; keys are
held transposed (rows, heads, head dim, positions), values as they come. Each test runs on every
kernel path this CPU has (kernels.c's move_rows) and on torch's operators (no library)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from handlers.model import native
from handlers.model.self_attention_cache import LayerCache, reorder
from tests.kernel_paths import kernel_paths


@pytest.fixture(autouse=True, params=[pytest.param("torch", id="torch"), *kernel_paths()])
def kernels(request: pytest.FixtureRequest) -> Iterator[native.Kernels | None]:
    """The process's kernels for the test (reorder asks native.current())."""
    yield native.use(request.param)
    native.use("auto")


ROWS, HEADS, DIM = 8, 2, 4


def grown(seed: int, positions: int) -> LayerCache:
    generator = torch.Generator().manual_seed(seed)

    def step() -> torch.Tensor:
        return torch.randn(ROWS, HEADS, 1, DIM, generator=generator)

    cache = LayerCache(step())
    for _ in range(positions):
        cache.append(step(), step())
    return cache


def filled(cache: LayerCache) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values as (rows, heads, positions, head dim) copies."""
    return cache._live[0][..., : cache.length].transpose(2, 3).clone(), cache._live[1][
        :, :, : cache.length
    ].clone()


def test_a_reorder_in_place_equals_a_copy_of_the_rows_kept() -> None:
    # Beams continue their own row, or another's (row 1 from 0, 4 and 5 both from 6), as a step does.
    # And rows that are sources and destinations at once: a reversal, a cycle, a swap among copies.
    for rows in (
        [0, 0, 2, 3, 6, 6, 6, 7],
        [7, 6, 5, 4, 3, 2, 1, 0],
        [1, 2, 3, 4, 5, 6, 7, 0],
        [1, 0, 0, 3, 3, 5, 4, 4],
        list(range(ROWS)),
    ):
        index = torch.tensor(rows)
        caches, copies = [grown(seed, 19) for seed in (1, 2)], [grown(seed, 19) for seed in (1, 2)]
        expected = []
        for copy in copies:
            copy.select(index)
            expected.append(filled(copy))
        reorder(caches, index)
        for cache, (keys, values) in zip(caches, expected, strict=True):
            assert torch.equal(filled(cache)[0], keys) and torch.equal(filled(cache)[1], values)
            assert cache.rows == ROWS
        caches[0].append(torch.ones(ROWS, HEADS, 1, DIM), torch.ones(ROWS, HEADS, 1, DIM))  # it grows on


def test_fewer_rows_copy_the_rows_kept_into_a_new_buffer() -> None:
    cache, copy = grown(3, 5), grown(3, 5)
    before = filled(copy)
    reorder([cache], torch.tensor([5, 2, 2]))
    keys, values = filled(cache)
    assert (
        cache.rows == 3
        and torch.equal(keys, before[0][[5, 2, 2]])
        and torch.equal(values, before[1][[5, 2, 2]])
    )


def test_the_cache_holds_what_concatenating_would_through_reorders_drops_and_growth() -> None:
    """Appends, beam reorders, dropped rows and a widening in a random order, past two doublings of the
    capacity, against the plain way: torch.cat for each position and indexing for each reorder."""
    generator = torch.Generator().manual_seed(11)
    rows = ROWS

    def step() -> torch.Tensor:
        return torch.randn(rows, HEADS, 1, DIM, generator=generator)

    first = (step(), step())
    cache, expected = LayerCache(first[1]), list(first)
    cache.append(*first)
    for position in range(1, 40):
        if position % 3 == 0:
            keep = int(torch.randint(1, rows + 1, (1,), generator=generator)) if position % 9 == 0 else rows
            keep = 2 * rows if position == 21 else keep  # a row per beam, as at a beam search's first step
            index = torch.randint(0, rows, (keep,), generator=generator).sort().values
            reorder([cache], index)
            expected = [x[index] for x in expected]
            rows = keep
        key, value = step(), step()
        keys, values = cache.append(key, value)
        expected = [torch.cat([expected[0], key], dim=2), torch.cat([expected[1], value], dim=2)]
        assert torch.equal(keys.transpose(2, 3), expected[0]) and torch.equal(values, expected[1])
        assert keys.stride(-1) == 1 and keys.stride(-2) % 16 == 0  # as attention reads them
    assert cache.length == 40
