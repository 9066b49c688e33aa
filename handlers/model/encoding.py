"""The encoder over real tokens only: every sentence of a cohort in one pass, no padding multiplied.

transformers' encoder runs on a padded batch, so its linear layers multiply the padding too (a
sentence is padded to the next multiple of 8: about a third more rows than tokens on Tatoeba), and
the fast decoder called it once per width group. Every operation of a Marian encoder layer but
attention works on each token alone (per-row int8, layer norm, the feed-forward), so here the
sentences' tokens are packed into one (tokens, d_model) matrix for all of them, and only attention
sees sentences: per width group, scattered into a zero-padded block and gathered back. With
handlers.model.attention, padding adds exact zeros, so each token's output is transformers'
encoder's bit for bit (tests/unit/test_encoding.py, fp32 and int8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from handlers.model.attention import attend, transposed_keys
from handlers.model.cross_attention import additive_mask
from handlers.model.layer_step import Forward
from handlers.model.projections import Projections


@dataclass(frozen=True)
class Packing:
    """Where each sentence's tokens sit: packed rows, and their slots in each width group's padded block.

    Sentences come in width order; group g holds `sentences[g]` sentences of padded width `widths[g]`,
    whose tokens are the packed rows `starts[g]:starts[g + 1]`, at the flat slots `slots[g]` of a
    (sentences x width) block."""

    positions: torch.Tensor  # (tokens,): each token's position in its sentence
    widths: list[int]
    sentences: list[int]
    starts: list[int]
    slots: list[torch.Tensor]
    masks: list[torch.Tensor]  # per group, additive_mask's (sentences, 1, width)

    @classmethod
    def of(cls, lengths: Sequence[int], widths: Sequence[int]) -> Packing:
        """`lengths` (real tokens) and padded `widths` of sentences already in width order."""
        groups: list[list[int]] = []
        for index, width in enumerate(widths):
            if groups and widths[groups[-1][0]] == width:
                groups[-1].append(index)
            else:
                groups.append([index])
        starts, slots, masks = [0], [], []
        for members in groups:
            width = widths[members[0]]
            slots.append(torch.cat([torch.arange(lengths[i]) + row * width for row, i in enumerate(members)]))
            starts.append(starts[-1] + sum(lengths[i] for i in members))
            keep = torch.zeros(len(members), width, dtype=torch.long)
            for row, i in enumerate(members):
                keep[row, : lengths[i]] = 1
            masks.append(additive_mask(keep))
        return cls(
            positions=torch.cat([torch.arange(n) for n in lengths]),
            widths=[widths[members[0]] for members in groups],
            sentences=[len(members) for members in groups],
            starts=starts,
            slots=slots,
            masks=masks,
        )

    def blocks(self, packed: torch.Tensor) -> list[torch.Tensor]:
        """Packed rows (tokens, d) -> per group (sentences, width, d), zeros at the padding."""
        out = []
        for g, width in enumerate(self.widths):
            block = packed.new_zeros((self.sentences[g] * width, packed.shape[-1]))
            block.index_copy_(0, self.slots[g], packed[self.starts[g] : self.starts[g + 1]])
            out.append(block.view(self.sentences[g], width, -1))
        return out


@dataclass(frozen=True)
class EncoderLayerStep:
    """One encoder layer's modules as PackedEncoder calls them (bound forwards: no hook checks)."""

    qkv: Projections
    out: Forward
    self_norm: Forward
    fc1: Forward
    activation: Forward
    fc2: Forward
    final_norm: Forward
    scale: float

    @classmethod
    def of(cls, layer: Any) -> EncoderLayerStep:
        attention = layer.self_attn
        return cls(
            qkv=Projections([attention.q_proj, attention.k_proj, attention.v_proj]),
            out=attention.out_proj.forward,
            self_norm=layer.self_attn_layer_norm.forward,
            fc1=layer.fc1.forward,
            activation=layer.activation_fn.forward,
            fc2=layer.fc2.forward,
            final_norm=layer.final_layer_norm.forward,
            scale=float(attention.scaling),
        )


class PackedEncoder:
    """A Marian encoder (transformers' MarianEncoder, post-norm) over packed tokens."""

    def __init__(self, encoder: Any) -> None:
        self.embed_tokens = encoder.embed_tokens
        self.embed_scale = encoder.embed_scale
        self.positions: torch.Tensor = encoder.embed_positions.weight
        self.heads = int(encoder.layers[0].self_attn.num_heads)
        self.layers = [EncoderLayerStep.of(layer) for layer in encoder.layers]

    def __call__(self, tokens: torch.Tensor, packing: Packing) -> torch.Tensor:
        """tokens (packed ids) -> (tokens, d_model), each row transformers' encoder output for it."""
        embedded: torch.Tensor = self.embed_tokens(tokens) * self.embed_scale
        hidden = embedded + self.positions[packing.positions]
        for layer in self.layers:
            attended = self._attend(layer, packing, layer.qkv.side_by_side(hidden))
            hidden = layer.self_norm(hidden + layer.out(attended))
            hidden = layer.final_norm(hidden + layer.fc2(layer.activation(layer.fc1(hidden))))
        return hidden

    def _attend(self, layer: EncoderLayerStep, packing: Packing, qkv: torch.Tensor) -> torch.Tensor:
        """Each sentence's tokens over its own, per width group (qkv: the packed q, k and v side by side,
        scattered into each group's block once); -> packed (tokens, d_model)."""
        parts = []
        for g, block in enumerate(packing.blocks(qkv)):
            q, k, v = (x.view(*x.shape[:2], self.heads, -1).transpose(1, 2) for x in layer.qkv.split(block))
            out = attend(q, transposed_keys(k), v.contiguous(), packing.masks[g], layer.scale)
            parts.append(out.view(-1, out.shape[-2] * out.shape[-1]).index_select(0, packing.slots[g]))
        return parts[0] if len(parts) == 1 else torch.cat(parts)
