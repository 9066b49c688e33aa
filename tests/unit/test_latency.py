"""Latency ladder: the naive baseline really pads, dynamic shapes never do; what a quick run must report
for every rung (the CTranslate2 peer included), checked on the run `make bench-quick` makes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import AutoTokenizer

from bench import ctranslate2_peer, ladder_rungs, ladder_targets, latency
from bench.common import Sentence
from handlers.handler_config import HandlerConfig
from handlers.model.batching import pad_batch
from handlers.model.vocabulary import target_token_ids
from handlers.scheduling import run


class FakeTranslator:
    """Records what reaches the decoders: the ids a dynamic rung hands the served loop
    (handlers.scheduling.run.translate_ids, replaced by `record`), the tensors of the fixed-128 call."""

    def __init__(self) -> None:
        self.generate_ids: list[list[list[int]]] = []
        self.model_inputs: list[torch.Tensor] = []
        self.tokenizer = self
        self.model = self
        self.pad_token_id = 0
        self.config = HandlerConfig()  # the decode rules DecodePolicy reads
        self.generation_config = SimpleNamespace(num_beams=4)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [[5] * len(text) for text in texts]

    def generate(self, **kwargs: Any) -> Any:  # model.generate
        self.model_inputs.append(kwargs["input_ids"])
        return kwargs["input_ids"][:, :2]

    def record(self, translator: Any, ids: Any, options: Any) -> list[list[str]]:
        self.generate_ids.append(ids)
        return [["x"]] * len(ids)

    def batch_decode(self, rows: Any, skip_special_tokens: bool) -> list[str]:
        return ["x"] * len(rows)


def test_fixed_padding_pads_every_row_to_128_and_dynamic_pads_one_sentence_to_its_multiple_of_8() -> None:
    ids = [[5, 6, 7], [8]]
    fixed, mask = ladder_rungs.pad_to_fixed(ids, 128, pad_id=0)
    assert fixed.shape == (2, 128) and mask.sum().item() == 4
    assert fixed[1, 1:].eq(0).all()
    single, single_mask = pad_batch([[5, 6, 7]], pad_id=0)
    assert single.shape == (1, 8) and int(single_mask.sum()) == 3


def test_rungs_send_fixed_128_or_unpadded_single_sentences(monkeypatch: pytest.MonkeyPatch) -> None:
    sentences = [Sentence("abc", "r", 4), Sentence("abcdefg", "r", 9)]
    fake = FakeTranslator()
    monkeypatch.setattr(run, "translate_ids", fake.record)
    for sentence in sentences:
        ladder_rungs.run_group(fake, ladder_rungs.LADDER[0], [sentence], beams=1, standin=True)
        ladder_rungs.run_group(fake, ladder_rungs.LADDER[1], [sentence], beams=1, standin=True)
    assert [tuple(t.shape) for t in fake.model_inputs] == [(1, 128), (1, 128)]
    assert fake.generate_ids == [[[5] * 3], [[5] * 7]]  # each sentence alone, its own length


def test_standin_batches_are_forced_to_their_longest_reference() -> None:
    sentences = [Sentence("a", "r", 4), Sentence("b", "r", 9)]
    assert [o.max_new_tokens for o in ladder_rungs.options_for(sentences, 1, True)] == [4, 9]
    shared = ladder_rungs.options_for(sentences, 4, True, shared=True)
    assert {(o.num_beams, o.min_new_tokens, o.max_new_tokens) for o in shared} == {(4, 9, 9)}
    assert [o.max_new_tokens for o in ladder_rungs.options_for(sentences, 1, False)] == [None, None]


def assert_quick_ladder(results_dir: Path, model_dir: Path) -> None:
    """What `python -m bench.latency --quick` must have written: every rung, the peer, the targets.

    Run once, by `make bench-quick` in tests/e2e/test_bench_quick.py (the quick ladder: about 45 s).
    """
    result = json.loads((results_dir / "latency.json").read_text())
    ladder = result["ladders"]["1"]
    rungs = ladder["rungs"]
    assert result["n"] == latency.QUICK_SENTENCES == ladder_rungs.BATCH == 16  # one full batch
    assert [row["rung"] for row in rungs] == [1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    assert all(row["p50_ms"] > 0 and row["sentences_per_s"] > 0 and row["rss_mb"] > 0 for row in rungs)
    assert all(row["peak_rss_mb"] >= row["rss_mb"] >= row["harness_rss_mb"] > 0 for row in rungs)
    assert result["standin"] is True and result["output_lengths"].startswith("reference lengths")
    assert result["notes"][-1] == latency.QUICK_NOTE  # forked rungs: their RSS is not their own
    version = ctranslate2_peer.version()
    assert result["peer"]["engine"] == f"CTranslate2 {version}"
    assert result["peer"]["note"] == "peer, not a serving option"
    peer = [f"CTranslate2 {version}"] * 2
    assert [row["engine"] for row in rungs] == ["torch"] * 4 + peer + ["torch"] * 3 + peer + ["torch"] * 2
    decoders = ["fast"] * 4 + [None] * 2 + ["generate"] * 2 + ["fast"] + [None] * 2 + ["fast"] * 2
    assert [row.get("decoder") for row in rungs] == decoders
    assert [bool(row.get("vocabulary_map")) for row in rungs] == [False] * 9 + [True] * 2 + [False] * 2
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert rungs[2]["target_vocabulary"] == str(len(target_token_ids(tokenizer, [tokenizer.pad_token_id])))
    assert [row.get("note") for row in rungs[4:6] + rungs[9:11]] == ["peer, not a serving option"] * 4
    per_batch = [row["rung"] in (4, 7, 9, 10, 12, 14) for row in rungs]
    assert [row["speedup_p50"] is None for row in rungs] == per_batch
    ratios = ladder["peer_ratios"]
    assert ratios["single_p50"] == pytest.approx(rungs[2]["p50_ms"] / rungs[4]["p50_ms"], rel=1e-2)
    assert ratios["batch_sentences_per_s"] == pytest.approx(
        rungs[3]["sentences_per_s"] / rungs[5]["sentences_per_s"], rel=1e-2
    )
    assert ratios["single_p50_vmap"] == pytest.approx(rungs[2]["p50_ms"] / rungs[9]["p50_ms"], rel=1e-2)
    assert ratios["batch_sentences_per_s_vmap"] == pytest.approx(
        rungs[3]["sentences_per_s"] / rungs[10]["sentences_per_s"], rel=1e-2
    )
    assert ratios["batch_sentences_per_s_vmap_onednn"] == pytest.approx(
        rungs[12]["sentences_per_s"] / rungs[10]["sentences_per_s"], rel=1e-2
    )
    assert {target["target"] for target in ladder["targets"]} == {
        "int8 dynamic p50 <= 1/3 of fp32 dynamic p50",
        "rung 3 >= 4x faster than rung 1 (p50)",
        "fast decoder one sentence >= 1.3x faster than generate() (p50)",
        "int8 private <= 60% of fp32 private + file-backed (after the run)",
        "our int8 single-sentence p50 <= CTranslate2's",
        "our int8 batch-16 sentences/s >= CTranslate2's",
        "our int8 single-sentence p50 <= CTranslate2 + map's",
        "our int8 batch-16 sentences/s >= CTranslate2 + map's",
    }
    table = ladder_targets.markdown(result)
    assert "| 3. int8, dynamic |" in table and "| 7. CTranslate2 int8, batches of 16 (peer) |" in table
    assert f"Ours / CTranslate2 {version} (peer, not a serving option)" in table
    assert "Fast decoder vs generate()" in table
    assert "| 12. CTranslate2 int8 + map, batches of 16 (peer) |" in table
    assert "Ours / the same with its target-side vocabulary map" in table


def test_the_memory_table_counts_a_models_weight_file_once_for_two_workers() -> None:
    by_rung = {
        4: {"rung": 4, "run_private_mb": 400, "run_file_mb": 100},
        2: {"rung": 2, "run_private_mb": 350, "run_file_mb": 340},
        3: {"rung": 3, "run_private_mb": 1, "run_file_mb": 1},  # not a compared rung
    }
    lines = ladder_targets.memory_table(by_rung, 16)
    assert lines[-2] == "| ours int8 (4) | 400 | 100 | 500 | 900 |"
    assert lines[-1] == "| ours fp32 (2) | 350 | 340 | 690 | 1040 |"
    assert ladder_targets.memory_table({3: by_rung[3]}, 16) == []
