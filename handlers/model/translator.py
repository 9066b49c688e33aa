"""Model-side work: load, quantize, tokenize with dynamic shapes, and the decode settings of a request.

A Translator holds the model, its tokenizer and its decoder; it drives no decode loop. Everything
decodes through the step scheduler: the server's partitions, the batch job, and, run to its end
in the caller's thread, the warm-up, benchmarks and tests (handlers.scheduling.run).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

from handlers.errors import OverLimit
from handlers.model import native
from handlers.model.attention import use_fixed_order_attention
from handlers.model.decoding import Decoder, make_decoder, release_copied_layers
from handlers.model.heap_trim import allocations_outside_the_heap
from handlers.model.long_sentences import fit
from handlers.model.model_config import ModelConfig
from handlers.model.quantization import (
    count_quantized_linear,
    drop_weight_file_pages,
    quantize_int8,
    return_freed_heap,
)
from handlers.model.standin_marker import STANDIN_MARKER

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    """What the server reports about the loaded model."""

    source: str
    standin: bool
    parameters: int
    quantized_linear: int
    threads: int
    load_seconds: float
    kernels: str = "torch"  # the C kernels' path (handlers.model.native), "torch" for none


def configure_threads(threads: int) -> None:
    """One process-wide setting: intra-op threads per worker (inter-op is unused by generate)."""
    torch.set_num_threads(threads)
    # Raises once parallel work already ran in this process; the setting is then fixed, which is harmless.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)


class Translator:
    def __init__(
        self, model: Any, tokenizer: Any, config: ModelConfig, info: ModelInfo, decoder: Decoder
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.info = info
        self.decoder = decoder

    @classmethod
    def load(cls, model_dir: Path, config: ModelConfig, threads: int | None = None) -> Translator:
        """Load from a local directory only (never the network), quantize if the variant says so.

        `threads`: intra-op threads of this process, config.threads unless given (a worker that
        forks partitions loads with 1: handlers.scheduling.partition_processes says why). No
        warm-up here: that decodes, and decoding is the served loop's
        (handlers.scheduling.run.load_and_warm_up does both)."""
        started = time.perf_counter()
        transformers_logging.disable_progress_bar()  # progress bars would flood the worker log
        configure_threads(config.threads if threads is None else threads)
        kernels = native.use(config.cpu_kernels)  # before quantizing: the int8 layers are made for them
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        # Long sentences are cut by handlers.model.long_sentences, never truncated: silence the warning.
        tokenizer.model_max_length = sys.maxsize
        # What loading frees goes back whole, not as holes in the heap (handlers.model.heap_trim).
        with allocations_outside_the_heap():
            model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, local_files_only=True)
            model.eval()
            use_fixed_order_attention(model)  # every attention in one order of ours, C where built
            # Every call passes max_new_tokens; the model's max_length would only trigger a warning.
            model.generation_config.max_length = None
            parameters = sum(p.numel() for p in model.parameters())
            if config.quantize:
                model = quantize_int8(model, config.int8_kernels)
                drop_weight_file_pages(model_dir)
            info = ModelInfo(
                source=_model_source(model_dir),
                standin=(model_dir / STANDIN_MARKER).exists(),
                parameters=parameters,
                quantized_linear=count_quantized_linear(model),
                threads=torch.get_num_threads(),
                load_seconds=0.0,
                kernels=native.name_of(kernels),
            )
            decoder = make_decoder(config.decoder, model, tokenizer)
            release_copied_layers(model, decoder)  # a server keeps no int8 weight twice
            return_freed_heap()  # what building the decoder released (an int8 model's full output layer)
        load_seconds = round(time.perf_counter() - started, 2)
        return cls(
            model, tokenizer, config, ModelInfo(**{**info.__dict__, "load_seconds": load_seconds}), decoder
        )

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids without padding; a text over the limit is refused (OverLimit), never truncated."""
        ids = self._encode_plain(texts)
        for index, row in enumerate(ids):
            if len(row) > self.config.max_input_tokens:
                raise OverLimit(
                    f"text {index} has {len(row)} tokens > max_input_tokens "
                    f"({self.config.max_input_tokens}); split it into sentences"
                )
        return ids

    def encode_sentences(self, sentences: Sequence[str]) -> list[list[list[int]]]:
        """Token ids per sentence, as chunks within max_input_tokens: a long one is cut, never truncated."""
        if not sentences:
            return []
        ids = self._encode_plain(sentences)
        return [
            fit(text, row, self._encode_plain, self.config.max_input_tokens)
            for text, row in zip(sentences, ids, strict=True)
        ]

    def _encode_plain(self, texts: Sequence[str]) -> list[list[int]]:
        encoded: list[list[int]] = self.tokenizer(list(texts), padding=False, truncation=False)["input_ids"]
        return encoded

    def ranked_texts(self, hypotheses: list[list[int]]) -> list[str]:
        """A sentence's finished hypotheses as texts, best first. Two may differ in ids yet read the
        same: an alternative must read differently."""
        texts: list[str] = self.tokenizer.batch_decode(hypotheses, skip_special_tokens=True)
        return list(dict.fromkeys(texts))


def _model_source(model_dir: Path) -> str:
    """The hub id or directory the weights came from, as recorded at build time."""
    marker = model_dir / STANDIN_MARKER
    if marker.exists():
        return str(json.loads(marker.read_text()).get("name", "offline stand-in"))
    config = json.loads((model_dir / "config.json").read_text())
    return str(config.get("_name_or_path") or model_dir.name)
