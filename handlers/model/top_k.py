"""A beam search's per-row top-k over the vocabulary: kernels.c where built, torch.topk otherwise.

torch.topk over 64 rows of 32,000 log-probabilities took about 2 ms a step, a sort's worth of work
for 8 values a row. kernels.c's top_k_rows scans each row once with a vector compare against its
current k-th best and keeps the few that beat it. Where no values tie, the k largest in order are
one answer, so it gives torch.topk's exactly; a row where a NaN or a tie could let torch.topk's own
order of equal values decide (a forced eos leaves every other column at -inf) is torch.topk's.
"""

from __future__ import annotations

import torch

from handlers.model import native


def top_k(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(values, k, dim=-1) (largest first): values and their indices, (..., k) each."""
    kernels = native.current()
    width = int(values.shape[-1])
    if kernels is None or values.dtype != torch.float32 or not 0 < k <= width:
        return torch.topk(values, k, dim=-1)
    rows = values.reshape(-1, width).contiguous()
    count = rows.shape[0]
    top, columns = rows.new_empty((count, k)), torch.empty((count, k), dtype=torch.long)
    undecided = torch.empty(count, dtype=torch.uint8)
    pointers = rows.data_ptr(), count, width, k, top.data_ptr(), columns.data_ptr(), undecided.data_ptr()
    if kernels.top_k_rows(*pointers):
        left = undecided.nonzero().flatten()
        top[left], columns[left] = torch.topk(rows[left], k, dim=-1)  # each row on its own: same answer
    shape = (*values.shape[:-1], k)
    return top.view(shape), columns.view(shape)
