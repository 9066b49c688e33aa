"""What loading and stepping the model needs to know, and nothing of requests, HTTP or their limits.

The handler's config (handlers.handler_config, the yaml's `handler:` section) holds every setting;
`HandlerConfig.model` hands the model layer this part of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Variant = Literal["fp32", "int8"]
# "fast": our own greedy/beam loops over the target-side output layer (handlers.model.decoding);
# "generate": transformers' generate(), kept to compare against.
DecoderName = Literal["fast", "generate"]
DECODER_NAMES: tuple[DecoderName, ...] = get_args(DecoderName)  # the registry: choices, yaml, benches
# The int8 matmul kernels (handlers.model.quantization.int8_kernels). fbgemm (the default) gives the
# outputs every earlier figure and test was made with; oneDNN uses AMX int8 tiles where the CPU has
# them (auto: oneDNN there, fbgemm elsewhere) and is faster, but rounds some outputs differently in
# the last bit (batch invariance holds on each): docs/BENCHMARKS.md measures both.
Int8Kernels = Literal["fbgemm", "onednn", "auto"]
# Our C kernels' instruction-set path (handlers.model.native): auto (the best one a host of ours has
# proven, of those the CPU offers), torch (none: torch's operators), or one path by name (for tests
# and benchmarks; a path this CPU lacks fails the load). Every path gives the same bits.
CpuKernels = Literal["auto", "torch", "generic", "avx2", "avx_vnni", "avx512_vnni", "amx"]

# The model's positional limit: opus-mt-zh-en has max_position_embeddings 512.
MODEL_MAX_TOKENS = 512


@dataclass(frozen=True)
class ModelConfig:
    """The weights, kernels, decoder and threads a Translator loads with, and the token limit its
    tokenizer enforces (a sentence over it is cut into chunks, never truncated). No defaults here:
    HandlerConfig's are the one set (docs/CONFIGURATION.md), and `HandlerConfig(...).model` makes one."""

    variant: Variant
    int8_kernels: Int8Kernels
    cpu_kernels: CpuKernels
    decoder: DecoderName
    threads: int
    max_input_tokens: int

    @property
    def quantize(self) -> bool:
        return self.variant == "int8"
