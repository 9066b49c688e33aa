"""The model-side code path on the tiny stand-in: dynamic shapes, quantization, token bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from handlers.batching import padded_width
from handlers.handler_config import HandlerConfig
from handlers.quantization import count_quantized_linear
from handlers.request_parsing import GenerationOptions, InvalidRequest
from handlers.translator import Translator, pad_batch

SENTENCES = ["汤姆不会同意的", "汤姆和他的朋友们在公园喝醉了", "是那家。"]


@pytest.fixture(scope="module")
def fp32(tiny_model_dir: Path) -> Translator:
    return Translator.load(tiny_model_dir, HandlerConfig(variant="fp32", warmup=False))


@pytest.fixture(scope="module")
def int8(tiny_model_dir: Path) -> Translator:
    return Translator.load(tiny_model_dir, HandlerConfig(variant="int8"))


def test_pad_batch_pads_to_the_longest_members_multiple_of_8() -> None:
    input_ids, mask = pad_batch([[5, 6, 0], [7, 0]], pad_id=99)
    assert input_ids.tolist() == [[5, 6, 0, *[99] * 5], [7, 0, *[99] * 6]]
    assert mask.tolist() == [[1, 1, 1, *[0] * 5], [1, 1, *[0] * 6]]
    assert pad_batch([[1] * 8], pad_id=99)[0].shape == (1, 8)  # a multiple of 8 gets no padding
    assert pad_batch([[1] * 9], pad_id=99)[0].shape == (1, 16)


def record_encoder_inputs(translator: Translator, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    original = translator.decoder.decode

    def spy(input_ids: torch.Tensor, *args: Any) -> Any:
        seen.append(input_ids)
        return original(input_ids, *args)

    monkeypatch.setattr(translator.decoder, "decode", spy)
    return seen


def test_single_text_is_padded_by_at_most_7_tokens(fp32: Translator, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_encoder_inputs(fp32, monkeypatch)
    fp32.translate([SENTENCES[0]], GenerationOptions(max_new_tokens=3))
    length = len(fp32.encode([SENTENCES[0]])[0])
    assert seen[0].shape == (1, padded_width(length)) and padded_width(length) - length < 8
    assert int((seen[0] != fp32.tokenizer.pad_token_id).sum()) == length


def test_batch_is_padded_to_its_longest_member(fp32: Translator, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_encoder_inputs(fp32, monkeypatch)
    fp32.translate(SENTENCES, GenerationOptions(max_new_tokens=3))
    lengths = [len(ids) for ids in fp32.encode(SENTENCES)]
    assert seen[0].shape == (3, padded_width(max(lengths)))
    assert padded_width(max(lengths)) < 128  # not a fixed length


def test_int8_quantizes_every_linear_and_fp32_none(fp32: Translator, int8: Translator) -> None:
    assert count_quantized_linear(fp32.model) == 0
    # Every Linear was quantized; the output layer now lives, cut to the target side, in the decoder.
    in_decoder = count_quantized_linear(int8.decoder.output)  # type: ignore[attr-defined]
    assert int8.info.quantized_linear == count_quantized_linear(int8.model) + in_decoder > in_decoder == 1
    assert not any(type(module) is nn.Linear for module in int8.model.modules())
    assert int8.info.parameters == fp32.info.parameters


def test_stand_in_is_labeled(fp32: Translator) -> None:
    assert fp32.info.standin and "stand-in" in fp32.info.source


def test_each_row_is_cut_to_its_own_cap(int8: Translator) -> None:
    ids = int8.encode(SENTENCES[:2])
    options = [
        GenerationOptions(num_beams=1, max_new_tokens=2, min_new_tokens=2),
        GenerationOptions(num_beams=1, max_new_tokens=9, min_new_tokens=9),
    ]
    short, long = int8.generate(ids, options)
    # The stand-in never emits eos before min_new_tokens, so lengths follow the caps.
    assert len(int8.tokenizer(text_target=short)["input_ids"]) < len(
        int8.tokenizer(text_target=long)["input_ids"]
    )


def test_one_generate_call_needs_one_beam_count(int8: Translator) -> None:
    ids = int8.encode(SENTENCES[:2])
    with pytest.raises(ValueError, match="beam"):
        int8.generate(ids, [GenerationOptions(num_beams=1), GenerationOptions(num_beams=2)])


def test_runaway_guard_bounds_new_tokens(int8: Translator) -> None:
    config = int8.config
    assert int8.new_token_cap(GenerationOptions(), 10) == min(
        config.max_new_tokens, int(config.new_tokens_ratio * 10) + config.new_tokens_slack
    )
    assert int8.new_token_cap(GenerationOptions(), 500) == config.max_new_tokens
    assert int8.new_token_cap(GenerationOptions(max_new_tokens=7), 500) == 7


def test_text_over_the_token_limit_is_rejected_not_truncated(tiny_model_dir: Path) -> None:
    translator = Translator.load(tiny_model_dir, HandlerConfig(max_input_tokens=8, warmup=False))
    with pytest.raises(InvalidRequest) as caught:
        translator.encode(["汤姆和他的朋友们在公园喝醉了，然后回家睡觉了。"])
    assert caught.value.status == 413 and "max_input_tokens (8)" in caught.value.message
