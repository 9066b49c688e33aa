"""One decoder layer's self-attention keys and values for a cohort's rows, grown in place.

Appending a position with cat() copied the whole cache on every step, and a beam search's reorder
copied it again. Here a position is written into spare capacity (doubled when full), attention
reads the filled part as a view, a beam search's reorder copies in place only the rows whose beam
came from another row (kernels.c's move_rows: their filled positions, once where it can), and
dropping ended sentences copies the rows kept once, into a new buffer (the old one is freed: no
second buffer is held). Attention over the view gives the same values, bit for bit, as over a
contiguous copy (the kernel reads by strides; the sums are over the same positions in the same
order), which the decoder's exactness tests against generate() check.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from handlers.model import native
from handlers.model.attention import KEY_PAD

INITIAL_POSITIONS = KEY_PAD


class LayerCache:
    """Keys (rows, heads, head dim, capacity) and values (rows, heads, capacity, head dim), the first
    `length` positions filled."""

    def __init__(self, like: torch.Tensor) -> None:
        """Empty, for rows like `like` (rows, heads, positions, head dim)."""
        self.length = 0
        self._live = _allocate(like, int(like.shape[0]), INITIAL_POSITIONS)

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's position (rows, heads, 1, head dim); return every position so far, as views:
        keys transposed (rows, heads, head dim, positions), values (rows, heads, positions, head dim)."""
        if self.length == self.capacity:
            grown = _allocate(self._live[1], self.rows, 2 * self.capacity)
            for old, new in zip(self._filled(), _filled(grown, self.length), strict=True):
                new.copy_(old)
            self._live = grown
        self.length += 1
        keys, values = self._filled()
        keys[..., -1].copy_(key[:, :, 0])
        values[:, :, -1].copy_(value[:, :, 0])
        return keys, values

    @property
    def rows(self) -> int:
        return int(self._live[1].shape[0])

    @property
    def capacity(self) -> int:
        return int(self._live[1].shape[2])

    def _filled(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _filled(self._live, self.length)

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows`, in that order (ended sentences dropped), in a new buffer."""
        keys, values = self._live
        self._live = keys.index_select(0, rows), values.index_select(0, rows)

    def move(self, destinations: torch.Tensor, sources: torch.Tensor) -> None:
        """Row destinations[i] becomes a copy of row sources[i] (filled positions), in place; the other
        rows stay."""
        kernels = native.current()
        if kernels is None or kernels.move_rows is None:
            for whole in self._live:
                whole.index_copy_(0, destinations, whole.index_select(0, sources))  # read all, then write
            return
        keys, values = self._live
        destinations, sources = (x.to(torch.int64).contiguous() for x in (destinations, sources))
        heads, dim, count = int(keys.shape[1]), int(keys.shape[2]), int(destinations.numel())
        scratch = keys.new_empty(count * heads * dim * self.length)
        pairs = destinations.data_ptr(), sources.data_ptr(), count, scratch.data_ptr()
        kernels.move_rows(keys.data_ptr(), heads * dim, self.capacity, self.length, *pairs)  # a run per dim
        kernels.move_rows(values.data_ptr(), heads, self.capacity * dim, self.length * dim, *pairs)


def reorder(caches: Sequence[LayerCache], rows: torch.Tensor) -> None:
    """Every layer's cache to the rows `rows`, in that order (a beam search's step).

    Most beams continue their own row: about three rows in four at beam 4 on the stand-in. Those
    are left where they are and only the rest are copied, in place; when the count changes (a
    sentence ended) each layer copies the rows kept into a new buffer.
    """
    if not caches:
        return
    count = caches[0].rows
    if int(rows.numel()) != count:
        for cache in caches:
            cache.select(rows)
        return
    destinations = (rows != torch.arange(count)).nonzero().flatten()
    if destinations.numel():
        sources = rows[destinations]
        for cache in caches:
            cache.move(destinations, sources)


def _allocate(like: torch.Tensor, rows: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values for `rows` rows of `positions` (like: a (rows, heads, positions, head dim) value)."""
    heads, dim = int(like.shape[1]), int(like.shape[3])
    return like.new_empty((rows, heads, dim, positions)), like.new_empty((rows, heads, positions, dim))


def _filled(live: tuple[torch.Tensor, torch.Tensor], length: int) -> tuple[torch.Tensor, torch.Tensor]:
    return live[0][..., :length], live[1][:, :, :length]
