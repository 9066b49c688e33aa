"""The packed encoder gives transformers' encoder output bit for bit, for every real token, whatever
the sentences beside it and however they are grouped by width (fp32 and int8, the lively tiny model)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.common import sample_sentences
from handlers.handler_config import HandlerConfig, Variant
from handlers.model.batching import pad_batch, padded_width
from handlers.model.encoding import PackedEncoder, Packing
from handlers.model.translator import Translator


def _packed(encoder: PackedEncoder, rows: list[list[int]]) -> list[torch.Tensor]:
    """Each row's encoder output through PackedEncoder, the rows packed in width order as the decoder does."""
    order = sorted(range(len(rows)), key=lambda i: padded_width(len(rows[i])))
    packing = Packing.of([len(rows[i]) for i in order], [padded_width(len(rows[i])) for i in order])
    out = encoder(torch.tensor([t for i in order for t in rows[i]]), packing)
    by_order = torch.split(out, [len(rows[i]) for i in order])
    return [by_order[order.index(i)] for i in range(len(rows))]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_packed_encoder_is_transformers_encoder_bit_for_bit(lively_model_dir: Path, variant: Variant) -> None:
    config = HandlerConfig(variant=variant, decoder="generate", warmup=False)  # keeps the model whole
    translator = Translator.load(lively_model_dir, config.model)
    encoder = translator.model.model.encoder
    rows = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 60)])
    assert len({padded_width(len(r)) for r in rows}) >= 3, "the sample must mix widths"
    packed = _packed(PackedEncoder(encoder), rows)
    alone_packed = [_packed(PackedEncoder(encoder), [row])[0] for row in rows[:12]]
    with torch.inference_mode():
        for i, row in enumerate(rows):
            ids, mask = pad_batch([row], translator.tokenizer.pad_token_id)
            alone = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[0, : len(row)]
            assert torch.equal(packed[i], alone), (
                f"sentence {i} ({len(row)} tokens) differs from transformers'"
            )
            if i < len(alone_packed):
                assert torch.equal(alone_packed[i], alone)
        # transformers' own batch, padded to its longest member: the same rows again
        ids, mask = pad_batch(rows[:16], translator.tokenizer.pad_token_id)
        batch = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        for i, row in enumerate(rows[:16]):
            assert torch.equal(packed[i], batch[i, : len(row)])


def test_packing_places_each_token_in_its_width_group() -> None:
    packing = Packing.of([3, 5, 9, 16, 2], [8, 8, 16, 16, 8])  # not in width order: a group per run
    assert packing.widths == [8, 16, 8] and packing.sentences == [2, 2, 1]
    assert packing.starts == [0, 8, 33, 35]
    assert packing.positions.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, *range(9), *range(16), 0, 1]
    rows = torch.arange(35, dtype=torch.float32)[:, None]
    first, second, third = packing.blocks(rows)
    assert first[:, :, 0].tolist() == [[0, 1, 2, 0, 0, 0, 0, 0], [3, 4, 5, 6, 7, 0, 0, 0]]
    assert second[0, :9, 0].tolist() == list(range(8, 17)) and second[0, 9:, 0].eq(0).all()
    assert second[1, :, 0].tolist() == list(range(17, 33))
    assert third[0, :, 0].tolist() == [33, 34, 0, 0, 0, 0, 0, 0]
    assert packing.masks[0][1, 0].tolist() == [0.0] * 5 + [-torch.inf] * 3
