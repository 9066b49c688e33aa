"""Cross-attention memory: each sentence's encoder keys and values, grouped by padded width.

A sentence is padded to a width that depends on its own length only (handlers.model.batching), and
attends over its encoder output together with the other sentences of that width, never padded
further for a longer neighbour. Since attention is ours (handlers.model.attention), masked padding
adds exact zeros, so the grouping no longer decides any bit; it keeps a short sentence from paying
for a long neighbour's keys. Keys are held transposed, as handlers.model.attention reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from handlers.model.attention import attend, select_sets


def additive_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(sentences, width) 1/0 -> (sentences, 1, width) float: 0 where attended, -inf elsewhere (as
    transformers' boolean mask becomes in handlers.model.attention), made once per sentence."""
    keep = attention_mask.bool()[:, None, :]
    return torch.zeros(keep.shape).masked_fill_(~keep, -torch.inf)


@dataclass
class WidthGroup:
    """Sentences of one padded width, shared by their beams."""

    keys: list[torch.Tensor]  # per decoder layer: (sentences, heads, head dim, width), transposed_keys'
    values: list[torch.Tensor]  # (sentences, heads, width, head dim)
    mask: torch.Tensor  # (sentences, 1, width), additive_mask's

    @property
    def sentences(self) -> int:
        return int(self.mask.shape[0])

    def keep(self, rows: torch.Tensor) -> WidthGroup:
        return WidthGroup(
            [select_sets(k, rows) for k in self.keys],
            [v.index_select(0, rows) for v in self.values],
            self.mask.index_select(0, rows),
        )


@dataclass
class CrossMemory:
    """The width groups of a decode, in sentence order: group g holds the next `sentences` sentences."""

    groups: list[WidthGroup]

    @property
    def sentences(self) -> int:
        return sum(group.sentences for group in self.groups)

    def keep(self, rows: torch.Tensor) -> CrossMemory:
        """The sentences `rows` (ascending), as each group keeps its own."""
        kept, start = [], 0
        for group in self.groups:
            inside = rows[(rows >= start) & (rows < start + group.sentences)] - start
            if inside.numel():
                kept.append(group.keep(inside))
            start += group.sentences
        return CrossMemory(kept)

    def attend(self, layer: int, query: torch.Tensor, scale: float) -> torch.Tensor:
        """query (sentences, heads, beams, head dim): each sentence over its own group's keys;
        -> (sentences, beams, heads, head dim)."""
        parts: Sequence[torch.Tensor] = (
            [query] if len(self.groups) == 1 else torch.split(query, [g.sentences for g in self.groups])
        )
        attended = [
            attend(part, group.keys[layer], group.values[layer], group.mask, scale)
            for part, group in zip(parts, self.groups, strict=True)
        ]
        return attended[0] if len(attended) == 1 else torch.cat(attended)
