"""A search's per-row top-k (beam) and argmax (greedy) over the vocabulary: kernels.c where built,
torch.topk and torch.argmax otherwise.

torch.topk over 64 rows of 32,000 log-probabilities took about 2 ms a step, a sort's worth of work
for 8 values a row. kernels.c's top_k_rows scans each row once with a vector compare against its
current k-th best and keeps the few that beat it. Where no values tie, the k largest in order are
one answer, so it gives torch.topk's exactly; a row where a NaN or a tie could let torch.topk's own
order of equal values decide (a forced eos leaves every other column at -inf) is torch.topk's.

arg_max is the same scan with k = 1. torch.argmax over 16 rows of 32,000 logits took 1.2 ms a
greedy step, 4% of a batch of 16's decode (bench/results/after-matmuls-2026-11-28); a row with a
tie for its best, a NaN or a best of -inf is torch.argmax's (first index of the maximum, NaN first).
"""

from __future__ import annotations

import torch

from handlers.model import native


def top_k(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(values, k, dim=-1) (largest first): values and their indices, (..., k) each."""
    scanned = _scan(values, k)
    if scanned is None:
        return torch.topk(values, k, dim=-1)
    rows, top, columns, left = scanned
    if left.numel():
        top[left], columns[left] = torch.topk(rows[left], k, dim=-1)  # each row on its own: same answer
    shape = (*values.shape[:-1], k)
    return top.view(shape), columns.view(shape)


def arg_max(values: torch.Tensor) -> torch.Tensor:
    """torch.argmax(values, dim=-1): the index of each row's largest value, (...) long."""
    scanned = _scan(values, 1)
    if scanned is None:
        return values.argmax(-1)
    rows, _, columns, left = scanned
    if left.numel():
        columns[left, 0] = rows[left].argmax(-1)
    return columns.view(values.shape[:-1])


def _scan(
    values: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """kernels.c's top_k_rows over values' rows: (rows, top, columns, rows it left undecided), or None
    where it cannot run (no library, not float32, k out of range)."""
    kernels = native.current()
    width = int(values.shape[-1])
    if kernels is None or values.dtype != torch.float32 or not 0 < k <= width:
        return None
    rows = values.reshape(-1, width).contiguous()
    count = rows.shape[0]
    top, columns = rows.new_empty((count, k)), torch.empty((count, k), dtype=torch.long)
    undecided = torch.empty(count, dtype=torch.uint8)
    pointers = rows.data_ptr(), count, width, k, top.data_ptr(), columns.data_ptr(), undecided.data_ptr()
    left = undecided.nonzero().flatten() if kernels.top_k_rows(*pointers) else undecided[:0].long()
    return rows, top, columns, left
