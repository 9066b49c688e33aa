"""One decoder layer's self-attention keys and values for a cohort's rows, grown in place.

Appending a position with cat() copied the whole cache on every step, and a beam search's reorder
copied it again. Here a position is written into spare capacity (doubled when full), attention
reads the filled part as a view, a beam search's reorder copies in place only the rows whose beam
came from another row, and dropping ended sentences copies the rows kept once, into a new buffer
(the old one is freed: no second buffer is held). Attention over the view gives the
same values, bit for bit, as over a contiguous copy (the kernel reads by strides; the sums are over
the same positions in the same order), which the decoder's exactness tests against generate() check.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

INITIAL_POSITIONS = 16


class LayerCache:
    """Keys and values, (rows, heads, capacity, head dim) each, the first `length` positions filled."""

    def __init__(self, key: torch.Tensor, value: torch.Tensor) -> None:
        self.length = 0
        self._live = _allocate(key, int(key.shape[0]), INITIAL_POSITIONS)
        self.append(key, value)

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's position (rows, heads, 1, head dim); return every position so far, as views."""
        keys = self._live[0]
        if self.length == keys.shape[2]:
            grown = _allocate(keys, int(keys.shape[0]), 2 * int(keys.shape[2]))
            for old, new in zip(self._live, grown, strict=True):
                new[:, :, : self.length].copy_(old[:, :, : self.length])
            self._live = grown
        end = self.length + 1
        for buffer, part in zip(self._live, (key, value), strict=True):
            buffer[:, :, self.length : end].copy_(part)
        self.length = end
        return self._live[0][:, :, :end], self._live[1][:, :, :end]

    @property
    def rows(self) -> int:
        return int(self._live[0].shape[0])

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows`, in that order (ended sentences dropped), in a new buffer."""
        kept = _allocate(self._live[0], int(rows.numel()), int(self._live[0].shape[2]))
        for old, new in zip(self._live, kept, strict=True):
            torch.index_select(old[:, :, : self.length], 0, rows, out=new[:, :, : self.length])
        self._live = kept

    def move(self, destinations: torch.Tensor, sources: torch.Tensor) -> None:
        """Row destinations[i] becomes a copy of row sources[i], in place; the other rows stay."""
        for buffer in self._live:
            filled = buffer[:, :, : self.length]
            filled.index_copy_(0, destinations, filled.index_select(0, sources))  # read all, then write


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
    shape = (rows, int(like.shape[1]), positions, int(like.shape[3]))
    return like.new_empty(shape), like.new_empty(shape)
