"""Attention in one order of float operations of our own: the same bits on every host, one C call a layer.

torch's scaled_dot_product_attention leaves the order of its sums to the BLAS under it (MKL picks
its kernels per CPU), so a decode's last bits could differ between an Intel and an AMD host; and
for a decoder step's one-position queries it calls that BLAS once per sentence and head, which was
most of the step's attention time. kernels.c's `attend` does a whole layer in one call, in the
order its comment states; `attend_in_torch` below follows it operation for operation, for hosts
without the library and as the tests' twin (tests/unit/test_attention.py: every path against it).

Every attention of the model runs it: the fast decoder calls `attend` directly, and transformers'
own forward and generate() (the encoder, the `generate` decoder, the reference the exactness tests
compare with) reach it through their attention interface (`use_fixed_order_attention`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from handlers.model import native

NAME = "zh_en_fixed_order"  # the model config's attn_implementation
KEY_PAD = 16  # kernels.c's ATTEND_PAD: a transposed key row is readable to this multiple
SHAPE, STRIDES = ctypes.c_int64 * 5, ctypes.c_int64 * 14  # attend's two arrays

LOG2E, ROUNDER, EXP_CUTOFF = 1.44269504088896341, 12582912.0, -87.0
LN2_HIGH, LN2_LOW = 0.693359375, -2.12194440e-4
EXP_POLYNOMIAL = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)


def padded_length(keys: int) -> int:
    return -(-keys // KEY_PAD) * KEY_PAD


def transposed_keys(keys: torch.Tensor, capacity: int | None = None) -> torch.Tensor:
    """(sets, heads, keys, dim) -> a (sets, heads, dim, keys) view of a buffer whose key axis holds
    `capacity` (at least the keys rounded up to KEY_PAD), as `attend` reads them."""
    sets, heads, length, dim = keys.shape
    buffer = keys.new_zeros((sets, heads, dim, capacity or padded_length(length)))
    buffer[..., :length].copy_(keys.transpose(2, 3))
    return buffer[..., :length]


def select_sets(keys_t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The sets `rows` of transposed keys, copied with their padding (the buffer's whole key axis)."""
    length, capacity = int(keys_t.shape[-1]), int(keys_t.stride(-2))
    if keys_t.stride(-1) != 1 or capacity < padded_length(length):
        return transposed_keys(keys_t.index_select(0, rows).transpose(2, 3))
    whole = keys_t.as_strided((*keys_t.shape[:-1], capacity), keys_t.stride())
    return whole.index_select(0, rows)[..., :length]


def attend(
    query: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """query (sets, heads, queries, dim), keys_t (sets, heads, dim, keys) from transposed_keys or a
    cache like it, values (sets, heads, keys, dim), mask additive (sets, queries or 1, keys) or None;
    -> (sets, queries, heads, dim), contiguous: transformers' layout, and a decoder's rows as they
    come (sentence, then beam) once the last two axes are joined. In C where the kernels are loaded."""
    kernels = native.current()
    if kernels is None or kernels.attend is None:
        return attend_in_torch(query, keys_t, values, mask, scale).transpose(1, 2).contiguous()
    return attend_in_c(kernels.attend, query, keys_t, values, mask, scale)


def attend_in_c(
    function: Callable[..., Any],
    query: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """`attend` through one path's kernels.c function (native.Kernels.attend)."""
    sets, heads, queries, dim = query.shape
    keys = int(keys_t.shape[-1])
    query, values = _last_axis_dense(query), _last_axis_dense(values)
    if keys_t.stride(-1) != 1 or keys_t.stride(-2) < padded_length(keys):
        keys_t = transposed_keys(keys_t.transpose(2, 3))  # the kernel reads whole vectors of keys
    if mask is not None:
        mask = _last_axis_dense(mask)
    mask_strides = (
        (mask.stride(0), mask.stride(1) if mask.shape[1] > 1 else 0) if mask is not None else (0, 0)
    )
    out = query.new_empty((sets, queries, heads, dim))
    strides = (*query.stride()[:3], *keys_t.stride()[:3], *values.stride()[:3], *mask_strides)
    function(
        query.data_ptr(),
        keys_t.data_ptr(),
        values.data_ptr(),
        None if mask is None else mask.data_ptr(),
        out.data_ptr(),
        SHAPE(sets, heads, queries, keys, dim),
        STRIDES(*strides, out.stride(0), out.stride(2), out.stride(1)),
        scale,
    )
    return out


def _last_axis_dense(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.stride(-1) == 1 or tensor.shape[-1] == 1 else tensor.contiguous()


def exp_in_torch(x: torch.Tensor) -> torch.Tensor:
    """kernels.c's exp_lanes, operation for operation: each multiply and add rounded on its own."""
    shifted = x * LOG2E + ROUNDER
    n = shifted - ROUNDER
    r = x - n * LN2_HIGH
    r = r - n * LN2_LOW
    z = r * r
    y = r * EXP_POLYNOMIAL[0] + EXP_POLYNOMIAL[1]
    for coefficient in EXP_POLYNOMIAL[2:]:
        y = y * r + coefficient
    y = y * z + r
    y = y + 1.0
    below = x < EXP_CUTOFF
    exponent = ((shifted.view(torch.int32) - 0x4B400000) + 127) << 23
    two_n = torch.where(below, 0, exponent).view(torch.float32)
    return torch.where(below, 0.0, y * two_n)


def attend_in_torch(
    query: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """kernels.c's attend in torch's element-wise operations, in its order: (sets, heads, queries, dim).
    A sum in order is a loop of adds (torch.sum's order is its own), so this is slow: a stand-in."""
    dim, keys = int(query.shape[-1]), int(keys_t.shape[-1])
    scores = query.new_zeros((*query.shape[:-1], keys))
    for d in range(dim):
        scores = scores + query[..., d : d + 1] * keys_t[:, :, None, d, :]
    scores = scores * scale
    if mask is not None:
        scores = scores + mask[:, None]
    e = exp_in_torch(scores - scores.amax(dim=-1, keepdim=True))
    padded = F.pad(e, (0, padded_length(keys) - keys)).view(*e.shape[:-1], -1, KEY_PAD)
    partial = query.new_zeros((*query.shape[:-1], KEY_PAD))
    for chunk in range(padded.shape[-2]):
        partial = partial + padded[..., chunk, :]
    width = KEY_PAD // 2
    while width:
        partial = partial[..., :width] + partial[..., width : 2 * width]
        width //= 2
    total = partial
    out = query.new_zeros(query.shape)
    for j in range(keys):
        out = out + e[..., j : j + 1] * values[:, :, None, j, :]
    return out / total


def fixed_order_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface (as sdpa_attention_forward): (batch, queries, heads, dim)."""
    if dropout:
        raise ValueError("fixed-order attention is for inference: dropout must be 0")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    mask = _additive(
        attention_mask, query, key, bool(kwargs.get("is_causal", getattr(module, "is_causal", False)))
    )
    return attend(query, transposed_keys(key), value, mask, scale), None


def _additive(
    mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, causal: bool
) -> torch.Tensor | None:
    """transformers' mask (bool: True attends, or additive; (batch, 1, queries or 1, keys)) as attend's."""
    queries, keys = int(query.shape[2]), int(key.shape[2])
    if mask is None:
        if not causal or queries == 1:
            return None
        allowed = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries)
        return torch.zeros(1, queries, keys).masked_fill_(~allowed, -torch.inf).expand(query.shape[0], -1, -1)
    if mask.shape[1] != 1:
        raise ValueError(f"fixed-order attention takes one mask for all heads, got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return torch.zeros(mask[:, 0].shape).masked_fill_(~mask[:, 0], -torch.inf)
    return mask[:, 0].float()


def use_fixed_order_attention(model: Any) -> None:
    """Make every attention of a transformers model ours (its forward, generate(), the encoder)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, fixed_order_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # boolean masks, as for torch's SDPA
    model.set_attn_implementation(NAME)
