"""One decoder layer's self-attention keys and values for a cohort's rows, grown in place.

Appending a position with cat() copied the whole cache on every step, and a beam search's reorder
copied it again. Here a position is written into spare capacity (doubled when full), attention
reads the filled part as a view, and a reorder copies the filled part once, into a new buffer for
the rows kept (the old one is freed: no second buffer is held). Attention over the view gives the
same values, bit for bit, as over a contiguous copy (the kernel reads by strides; the sums are over
the same positions in the same order), which the decoder's exactness tests against generate() check.
"""

from __future__ import annotations

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

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows`, in that order (a beam search's reorder, or ended sentences dropped)."""
        kept = _allocate(self._live[0], int(rows.numel()), int(self._live[0].shape[2]))
        for old, new in zip(self._live, kept, strict=True):
            torch.index_select(old[:, :, : self.length], 0, rows, out=new[:, :, : self.length])
        self._live = kept


def _allocate(like: torch.Tensor, rows: int, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (rows, int(like.shape[1]), positions, int(like.shape[3]))
    return like.new_empty(shape), like.new_empty(shape)
