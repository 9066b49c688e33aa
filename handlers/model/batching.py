"""How far each sentence is padded.

A sentence is padded to the next multiple of PAD_MULTIPLE tokens, a width that depends on its
own length only, so it meets the same attention shapes alone or beside any other sentence
(handlers.model.cross_attention says why that matters). That costs at most 7 pad tokens per sentence,
never a fixed length.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

PAD_MULTIPLE = 8


def padded_width(length: int) -> int:
    """The encoder width a sentence of `length` tokens is padded to, alone or in any batch."""
    return -(-length // PAD_MULTIPLE) * PAD_MULTIPLE


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest member's padded width (dynamic shapes, never a fixed length).

    The width is the next multiple of 8 (padded_width), so a sentence alone is
    padded exactly as the decoder pads it within any batch.
    """
    longest = padded_width(max(len(row) for row in ids))
    input_ids = torch.full((len(ids), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for row, tokens in enumerate(ids):
        input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention_mask[row, : len(tokens)] = 1
    return input_ids, attention_mask
