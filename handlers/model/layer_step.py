"""A decoder layer's modules as FastDecoder.step calls them at every position."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from handlers.model.projections import Projections

Forward = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LayerStep:
    """One decoder layer's modules as the step calls them: their bound forward methods.

    The step calls 12 modules a layer at every position; nn.Module.__call__'s hook checks cost
    several microseconds each, more than some layers' arithmetic for one sentence. The forward
    methods are what __call__ runs (no hooks are registered), so every value is the same.
    """

    self_qkv: Projections
    self_out: Forward
    self_norm: Forward
    cross_query: Forward
    cross_out: Forward
    cross_norm: Forward
    fc1: Forward
    activation: Forward
    fc2: Forward
    final_norm: Forward
    self_scale: float
    cross_scale: float

    @classmethod
    def of(cls, layer: Any, self_qkv: Projections) -> LayerStep:
        own, cross = layer.self_attn, layer.encoder_attn
        return cls(
            self_qkv=self_qkv,
            self_out=own.out_proj.forward,
            self_norm=layer.self_attn_layer_norm.forward,
            cross_query=cross.q_proj.forward,
            cross_out=cross.out_proj.forward,
            cross_norm=layer.encoder_attn_layer_norm.forward,
            fc1=layer.fc1.forward,
            activation=layer.activation_fn.forward,
            fc2=layer.fc2.forward,
            final_norm=layer.final_layer_norm.forward,
            self_scale=float(own.scaling),
            cross_scale=float(cross.scaling),
        )
