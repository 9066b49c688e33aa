"""Several projections of one input in one call: the decoder's q/k/v, and every layer's cross-attention k/v.

int8 layers fuse exactly (handlers.model.row_int8.fuse: one row mapping and one matmul, each output
equal to its own layer's bit for bit), which matters most for one sentence, where a call's fixed
cost outweighs its arithmetic. fp32 layers run in turn and are concatenated, so their results
stay exactly those of the model's own modules (and of generate()).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from handlers.model.row_int8 import RowInt8Linear, fuse


class Concatenated(nn.Module):
    """The layers one after another, their outputs side by side."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([layer(x) for layer in self.layers], dim=-1)


class Projections:
    """Callable: the input's projection by each layer, in order (views into one output)."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        self.widths = [int(layer.out_features) for layer in layers]  # type: ignore[arg-type]
        int8 = [layer for layer in layers if isinstance(layer, RowInt8Linear)]
        self.joined: nn.Module = fuse(int8) if len(int8) == len(layers) else Concatenated(layers)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.split(self.side_by_side(x))

    def side_by_side(self, x: torch.Tensor) -> torch.Tensor:
        """Every projection of `x` in one tensor, side by side on the last axis."""
        # forward, not __call__: no hooks are registered, and the decoder calls this every position.
        return self.joined.forward(x)  # type: ignore[no-any-return]

    def split(self, joined: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """side_by_side's output (or rows of it) cut into each projection's."""
        return torch.split(joined, self.widths, dim=-1)
