"""The latency ladder's rungs, and how one in-process rung is measured in a process of its own.

bench.latency runs them in order (with the HTTP rung, which it measures itself) and writes the ladder.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.common import Sentence, is_standin, percentiles
from bench.process_memory import memory_mb
from handlers.handler_config import DecoderName, HandlerConfig, Int8Kernels, Variant
from handlers.scheduling.policy import DecodePolicy

Shape = Literal["fixed128", "dynamic", "batch", "http"]
Engine = Literal["torch", "ctranslate2"]
FIXED_LENGTH = 128
BATCH = 16
WARMUP = 2


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    variant: Variant
    shape: Shape
    engine: Engine = "torch"
    decoder: DecoderName = "fast"
    # CTranslate2 only: restrict its output to the target side (use_vmap), as our output layer is.
    vmap: bool = False
    # On the stand-in a batch is forced to its longest reference (equal work for every engine, as
    # CTranslate2 takes one length per batch); False: each sentence to its own, as eos would end it.
    shared_lengths: bool = True
    # Ours only: the int8 matmul kernels (handlers.model.quantization.int8_kernels).
    int8_kernels: Int8Kernels = "fbgemm"


LADDER = (
    Rung(1, "fp32, padded to 128", "fp32", "fixed128"),
    Rung(2, "fp32, dynamic", "fp32", "dynamic"),
    Rung(3, "int8, dynamic", "int8", "dynamic"),
    Rung(4, f"int8, dynamic, batches of {BATCH}", "int8", "batch"),
)
OWN_LENGTHS_RUNG = Rung(
    10, f"int8, dynamic, batches of {BATCH}, own lengths", "int8", "batch", shared_lengths=False
)
GENERATE_RUNGS = (
    Rung(8, "int8, dynamic, generate()", "int8", "dynamic", decoder="generate"),
    Rung(9, f"int8, dynamic, batches of {BATCH}, generate()", "int8", "batch", decoder="generate"),
)
HTTP_RUNG = Rung(5, "int8, dynamic, through TorchServe", "int8", "http")
PEER_RUNGS = (
    Rung(6, "CTranslate2 int8, one sentence (peer)", "int8", "dynamic", "ctranslate2"),
    Rung(7, f"CTranslate2 int8, batches of {BATCH} (peer)", "int8", "batch", "ctranslate2"),
)
MAPPED_PEER_RUNGS = (
    Rung(11, "CTranslate2 int8 + map, one sentence (peer)", "int8", "dynamic", "ctranslate2", vmap=True),
    Rung(12, f"CTranslate2 int8 + map, batches of {BATCH} (peer)", "int8", "batch", "ctranslate2", vmap=True),
)
# The opt-in oneDNN kernels (AMX int8 where the CPU has it), beside rungs 3 and 4.
ONEDNN_RUNGS = (
    Rung(13, "int8, dynamic, oneDNN kernels", "int8", "dynamic", int8_kernels="onednn"),
    Rung(14, f"int8, dynamic, batches of {BATCH}, oneDNN kernels", "int8", "batch", int8_kernels="onednn"),
)


def pad_to_fixed(ids: Sequence[Sequence[int]], length: int, pad_id: int) -> tuple[Any, Any]:
    """The naive baseline: every row padded to `length`, whatever its own length."""
    import torch

    input_ids = torch.full((len(ids), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(ids), length), dtype=torch.long)
    for row, tokens in enumerate(ids):
        if len(tokens) > length:
            raise ValueError(f"input of {len(tokens)} tokens does not fit the fixed {length}")
        input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention_mask[row, : len(tokens)] = 1
    return input_ids, attention_mask


def options_for(sentences: Sequence[Sentence], beams: int, standin: bool, shared: bool = False) -> list[Any]:
    """Per-sentence options; a stand-in is forced to reference lengths (`shared`: all to the longest)."""
    from handlers.model.options import GenerationOptions

    if not standin:
        return [GenerationOptions(num_beams=beams) for _ in sentences]
    lengths = [s.reference_tokens for s in sentences]
    if shared:
        lengths = [max(lengths)] * len(lengths)
    return [GenerationOptions(beams, n, n) for n in lengths]


def groups_of(rung: Rung, sentences: list[Sentence]) -> list[list[Sentence]]:
    if rung.shape == "batch":
        return [sentences[i : i + BATCH] for i in range(0, len(sentences), BATCH)]
    return [[sentence] for sentence in sentences]


def measure_in_process(
    rung: Rung, model_dir: Path, sentences: list[Sentence], beams: int, converted: Path | None = None
) -> dict[str, Any]:
    """Runs in a fresh process: load, gc, memory, warm up, time every sentence (or batch), memory again.

    `converted`: the CTranslate2 model directory, for the peer rungs (bench.ctranslate2_peer.convert).
    """
    standin = is_standin(model_dir)
    harness = memory_mb()["rss_mb"]  # Python, torch and transformers, before the engine loads
    run_group, engine = load_engine(rung, model_dir, beams, standin, converted)
    gc.collect()
    loaded = memory_mb()
    groups = groups_of(rung, sentences)
    for group in groups[:WARMUP]:
        run_group(group)
    seconds = []
    started = time.perf_counter()
    for group in groups:
        began = time.perf_counter()
        run_group(group)
        seconds.append(time.perf_counter() - began)
    total = time.perf_counter() - started
    return {
        **engine,
        **percentiles(seconds),
        "sentences_per_s": round(len(sentences) / total, 2),
        **loaded,
        "harness_rss_mb": harness,
        **{f"run_{key}": value for key, value in memory_mb().items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def load_engine(
    rung: Rung, model_dir: Path, beams: int, standin: bool, converted: Path | None
) -> tuple[Callable[[list[Sentence]], None], dict[str, str]]:
    """The rung's engine, loaded: a function that translates one group, and what the row says about it."""
    if rung.engine == "ctranslate2":
        from bench import ctranslate2_peer

        if converted is None:
            raise ValueError(f"rung {rung.number} needs the model converted by ctranslate2_peer.convert")
        peer = ctranslate2_peer.PeerTranslator(model_dir, converted, use_vmap=rung.vmap)
        label = {"engine": f"CTranslate2 {ctranslate2_peer.version()}", "note": ctranslate2_peer.NOTICE}
        if rung.vmap:
            label["vocabulary_map"] = "target side (every target.spm piece)"
        return (lambda group: run_peer_group(peer, group, beams, standin)), label
    from handlers.model.translator import Translator

    config = HandlerConfig(
        variant=rung.variant, threads=1, warmup=False, decoder=rung.decoder, int8_kernels=rung.int8_kernels
    )
    translator = Translator.load(model_dir, config.model)
    label = {"engine": "torch", "decoder": rung.decoder}
    if rung.decoder == "fast":
        label["target_vocabulary"] = str(translator.decoder.output.size)  # type: ignore[attr-defined]
    return (lambda group: run_group(translator, rung, group, beams, standin)), label


def run_group(translator: Any, rung: Rung, group: list[Sentence], beams: int, standin: bool) -> None:
    from handlers.scheduling.run import translate_ids  # the served loop, run to its end here

    options = options_for(group, beams, standin, shared=rung.shape == "batch" and rung.shared_lengths)
    ids = translator.encode([s.source for s in group])
    if rung.shape == "fixed128":
        generate_fixed(translator, ids, options[0])
    else:
        translate_ids(translator, ids, options)


def run_peer_group(peer: Any, group: list[Sentence], beams: int, standin: bool) -> None:
    """One CTranslate2 call for the group, forced like ours: a batch to its longest reference."""
    from bench.ctranslate2_peer import decoding_lengths

    lengths = decoding_lengths([s.reference_tokens for s in group], standin)
    peer.translate([s.source for s in group], beams, lengths)


def generate_fixed(translator: Any, ids: list[list[int]], option: Any) -> None:
    """Rung 1: one sentence padded to 128, with the same generate() arguments as Translator.generate."""
    import torch

    input_ids, attention_mask = pad_to_fixed(ids, FIXED_LENGTH, translator.tokenizer.pad_token_id)
    policy = DecodePolicy.of(HandlerConfig(), translator)  # the shipped rules, as the ladder's config
    kwargs = {"max_new_tokens": policy.new_token_cap(option, len(ids[0]))}
    if (num_beams := policy.beams_for(option)) is not None:
        kwargs["num_beams"] = num_beams
    if option.min_new_tokens is not None:
        kwargs["min_new_tokens"] = option.min_new_tokens
    with torch.inference_mode():
        output = translator.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    translator.tokenizer.batch_decode(output, skip_special_tokens=True)
