"""The int8 kernels: a sentence decodes the same alone and in batches under oneDNN too, and the
choice of engine is what the config asks.

The engine is process-wide, so oneDNN is loaded in a spawned child of its own. On the lively tiny
stand-in, 64 test sentences alone and in batches of 16, greedy and beam 4. Against fbgemm it may
differ in the last bit of some outputs (handlers.model.quantization.int8_kernels), so its ids are
not compared with fbgemm's (tests/unit/test_batch_invariance.py holds fbgemm to the same property).
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
import torch

from handlers.handler_config import Int8Kernels
from handlers.model.quantization import int8_kernels

SENTENCES = 64


def decode_with(model_dir: Path, kernels: Int8Kernels) -> dict[str, Any]:
    from bench.common import sample_sentences
    from handlers.handler_config import HandlerConfig
    from handlers.model.decoding import RowLimits
    from handlers.model.translator import Translator
    from handlers.scheduling.run import decode_ids

    translator = Translator.load(
        model_dir, HandlerConfig(variant="int8", int8_kernels=kernels, warmup=False).model
    )
    sentences = sample_sentences(translator.tokenizer, SENTENCES)
    ids = translator.encode([s.source for s in sentences])
    limits = [RowLimits(min(40, 2 * len(row) + 10)) for row in ids]

    def decode(rows: list[list[int]], bounds: list[RowLimits], beams: int) -> list[list[int]]:
        return [ranked[0] for ranked in decode_ids(translator, rows, bounds, beams)]

    outputs: dict[str, Any] = {"engine": torch.backends.quantized.engine}
    for beams in (1, 4):
        outputs[f"alone {beams}"] = [
            decode([row], [limit], beams)[0] for row, limit in zip(ids, limits, strict=True)
        ]
        batched: list[list[int]] = []
        for start in range(0, SENTENCES, 16):
            batched += decode(ids[start : start + 16], limits[start : start + 16], beams)
        outputs[f"batched {beams}"] = batched
    return outputs


def in_child(model_dir: Path, kernels: Int8Kernels) -> dict[str, Any]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result: dict[str, Any] = pool.apply(decode_with, (model_dir, kernels))
    return result


@pytest.mark.skipif("onednn" not in torch.backends.quantized.supported_engines, reason="no oneDNN engine")
def test_a_sentence_decodes_the_same_alone_and_in_batches_under_onednn(lively_model_dir: Path) -> None:
    onednn = in_child(lively_model_dir, "onednn")
    assert onednn["engine"] == "onednn"
    for beams in (1, 4):
        alone, batched = onednn[f"alone {beams}"], onednn[f"batched {beams}"]
        differ = [i for i in range(SENTENCES) if alone[i] != batched[i]]
        assert differ == [], f"oneDNN, beam {beams}: batches of 16 change sentences {differ[:8]}"


def test_the_engine_is_the_one_asked_for() -> None:
    amx = torch.cpu._is_amx_tile_supported()
    assert int8_kernels("auto") == ("onednn" if amx else "fbgemm")
    assert int8_kernels("fbgemm") == "fbgemm"
    assert int8_kernels("onednn") == "onednn"
