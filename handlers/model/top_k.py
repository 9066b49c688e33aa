"""A search's per-row top-k (beam) and argmax (greedy) over the vocabulary: kernels.c where built,
torch.topk and torch.argmax otherwise.

torch.topk over 64 rows of 32,000 log-probabilities took about 2 ms a step, a sort's worth of work
for 8 values a row. kernels.c's top_k_rows scans each row once with a vector compare against its
current k-th best and keeps the few that beat it. Where no values tie, the k largest in order are
one answer, so it gives torch.topk's exactly; a row where a NaN or a tie could let torch.topk's own
order of equal values decide (a forced eos leaves every other column at -inf) is torch.topk's.

log_softmax_top_k is a beam step's log_softmax and top-k together: kernels.c's log_softmax_top_k_rows
gives torch's log-probabilities bit for bit (same vector width, order and Sleef functions as torch's
kernel on this CPU) and scans them for the top-k in the pass that writes them, where torch's
log_softmax wrote 64 x 32,000 floats and the scan read them back.

arg_max is the same scan with k = 1. torch.argmax over 16 rows of 32,000 logits took 1.2 ms a
greedy step, 4% of a batch of 16's decode (bench/results/after-matmuls-2026-11-28); a row with a
tie for its best, a NaN or a best of -inf is torch.argmax's (first index of the maximum, NaN first).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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


def log_softmax_top_k(
    logits: torch.Tensor, k: int, banned: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """F.log_softmax(logits, dim=-1) with each row's column banned[r] (where >= 0) then set to -inf, and
    top_k of that: (log-probabilities, their k largest per row, their columns). logits (rows, width)
    is overwritten with the log-probabilities where the C kernel runs."""
    kernels = native.current()
    rows, width = logits.shape
    fused = kernels is not None and kernels.log_softmax_top_k_rows is not None and kernels.vector_math
    if not fused or logits.dtype != torch.float32 or not logits.is_contiguous() or width < 16 or k > width:
        log_probs = F.log_softmax(logits, dim=-1)
        hit = (banned >= 0).nonzero().flatten()
        if hit.numel():
            log_probs[hit, banned[hit]] = -torch.inf
        return log_probs, *top_k(log_probs, k)
    assert kernels is not None and kernels.log_softmax_top_k_rows is not None and kernels.vector_math
    top, columns = logits.new_empty((rows, k)), torch.empty((rows, k), dtype=torch.long)
    undecided = torch.empty(rows, dtype=torch.uint8)
    banned = banned.to(torch.int64).contiguous()
    exp, log = kernels.vector_math
    pointers = (logits.data_ptr(), rows, width, k, banned.data_ptr(), exp, log)
    left = kernels.log_softmax_top_k_rows(*pointers, top.data_ptr(), columns.data_ptr(), undecided.data_ptr())
    if left:
        which = undecided.nonzero().flatten()
        top[which], columns[which] = torch.topk(logits[which], k, dim=-1)  # each row on its own: same answer
    return logits, top, columns


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
