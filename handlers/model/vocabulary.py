"""The target-side vocabulary: the only ids the decoder may emit, and an output layer restricted to them.

opus-mt-zh-en has one 65,001-entry vocabulary for both sides, but English output only ever uses
the pieces of its `target.spm` (about 32k). Scoring just those rows skips half the output layer
and half of every softmax and top-k over it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from handlers.model.row_int8 import RowInt8Linear


def target_token_ids(tokenizer: Any, excluded: Iterable[int] = ()) -> torch.Tensor:
    """Sorted ids of every target.spm piece found in the joint vocabulary, plus eos and unk.

    Sorted ascending, so that argmax and top-k break exact ties toward the lower id, as they do over
    the full vocabulary. `excluded` (pad, bad words) never reaches the output.
    """
    spm, vocab = tokenizer.spm_target, tokenizer.encoder
    ids = {tokenizer.eos_token_id, tokenizer.unk_token_id}
    for index in range(spm.get_piece_size()):
        if not spm.is_control(index) and not spm.is_unknown(index):
            piece = spm.id_to_piece(index)
            if piece in vocab:
                ids.add(vocab[piece])
    ids -= set(excluded)
    return torch.tensor(sorted(ids), dtype=torch.long)


# Rows of logits are padded to a multiple of 16 floats (one AVX-512 vector). Row-wise kernels take a
# slow path on an odd width: log_softmax over 64 x 31,999 took 8.1 ms, over 64 x 32,000 1.2 ms (a
# one-off micro-benchmark, torch 2.13, Xeon 2 vCPU, 2026-11-25; in the decoder's profile the gain
# is smaller, docs/BENCHMARKS.md).
COLUMN_MULTIPLE = 16


class TargetOutputLayer(nn.Module):
    """lm_head and final_logits_bias cut to the target-side rows; `ids[k]` is the full id of column k.

    An int8 head is sliced from the already-quantized weight (per-tensor scale and zero point
    kept), so every kept logit is computed exactly as the full head computes it. Filler columns
    (up to COLUMN_MULTIPLE) repeat the last row with a bias of -inf: they can never be chosen.
    """

    def __init__(self, lm_head: nn.Module, final_logits_bias: torch.Tensor, ids: torch.Tensor) -> None:
        super().__init__()
        self.size = int(ids.numel())  # the target-side pieces, fillers left out
        filler = ids[-1:].repeat(-self.size % COLUMN_MULTIPLE)  # any real row: its logit is -inf
        self.ids = torch.cat([ids, filler])
        bias = final_logits_bias.reshape(-1)[ids]
        self.bias = torch.cat([bias, torch.full((filler.numel(),), -torch.inf)])
        self.head = _slice_rows(lm_head, self.ids)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # Added after the matmul, as MarianMTModel does, so the sums round the same way.
        if isinstance(self.head, RowInt8Linear):
            return self.head.forward_then_add(hidden, self.bias)
        logits: torch.Tensor = self.head(hidden)
        return logits.add_(self.bias)


def _slice_rows(lm_head: nn.Module, ids: torch.Tensor) -> nn.Module:
    if isinstance(lm_head, RowInt8Linear):
        return lm_head.rows(ids)
    if isinstance(lm_head, nn.Linear):
        linear = nn.Linear(lm_head.in_features, int(ids.numel()), bias=lm_head.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(lm_head.weight[ids])
            if lm_head.bias is not None:
                linear.bias.copy_(lm_head.bias[ids])
        return linear.eval()
    raise TypeError(f"cannot restrict an output layer of type {type(lm_head).__name__}")
