"""The model-side code path on the tiny stand-in: dynamic shapes, quantization, token bounds."""

from __future__ import annotations

import mmap
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from handlers.errors import OverLimit
from handlers.handler_config import HandlerConfig
from handlers.model.batching import pad_batch, padded_width
from handlers.model.decoding import FastDecoder, Released
from handlers.model.options import GenerationOptions
from handlers.model.quantization import count_quantized_linear, drop_weight_file_pages
from handlers.model.translator import Translator
from handlers.scheduling.policy import DecodePolicy
from handlers.scheduling.run import translate, translate_ids
from handlers.wire.errors import client_error

SENTENCES = ["汤姆不会同意的", "汤姆和他的朋友们在公园喝醉了", "是那家。"]


@pytest.fixture(scope="module")
def fp32(tiny_model_dir: Path) -> Translator:
    return Translator.load(tiny_model_dir, HandlerConfig(variant="fp32", warmup=False).model)


@pytest.fixture(scope="module")
def int8(tiny_model_dir: Path) -> Translator:
    return Translator.load(tiny_model_dir, HandlerConfig(variant="int8").model)


def test_pad_batch_pads_to_the_longest_members_multiple_of_8() -> None:
    input_ids, mask = pad_batch([[5, 6, 0], [7, 0]], pad_id=99)
    assert input_ids.tolist() == [[5, 6, 0, *[99] * 5], [7, 0, *[99] * 6]]
    assert mask.tolist() == [[1, 1, 1, *[0] * 5], [1, 1, *[0] * 6]]
    assert pad_batch([[1] * 8], pad_id=99)[0].shape == (1, 8)  # a multiple of 8 gets no padding
    assert pad_batch([[1] * 9], pad_id=99)[0].shape == (1, 16)


def record_encoder_inputs(translator: Translator, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The input ids of each cohort the served loop starts."""
    seen: list[torch.Tensor] = []
    original = translator.decoder.start

    def spy(owners: Any, input_ids: torch.Tensor, *args: Any) -> Any:
        seen.append(input_ids)
        return original(owners, input_ids, *args)

    monkeypatch.setattr(translator.decoder, "start", spy)
    return seen


def test_single_text_is_padded_by_at_most_7_tokens(fp32: Translator, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_encoder_inputs(fp32, monkeypatch)
    translate(fp32, [SENTENCES[0]], GenerationOptions(max_new_tokens=3))
    length = len(fp32.encode([SENTENCES[0]])[0])
    assert seen[0].shape == (1, padded_width(length)) and padded_width(length) - length < 8
    assert int((seen[0] != fp32.tokenizer.pad_token_id).sum()) == length


def test_batch_is_padded_to_its_longest_member(fp32: Translator, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = record_encoder_inputs(fp32, monkeypatch)
    translate(fp32, SENTENCES, GenerationOptions(max_new_tokens=3))
    lengths = [len(ids) for ids in fp32.encode(SENTENCES)]
    assert seen[0].shape == (3, padded_width(max(lengths)))
    assert padded_width(max(lengths)) < 128  # not a fixed length


def test_int8_quantizes_every_linear_and_fp32_none(fp32: Translator, int8: Translator) -> None:
    assert count_quantized_linear(fp32.model) == 0
    # Every Linear was quantized. The decoder holds its own copies of some (the output layer cut to the
    # target side, q/k/v and cross k/v fused) and the model's originals are released, not kept twice.
    decoder = int8.decoder
    assert isinstance(decoder, FastDecoder)
    released = sum(isinstance(module, Released) for module in int8.model.modules())
    assert int8.info.quantized_linear == count_quantized_linear(int8.model) + released
    encoder_layers = decoder.encoder.layers
    # lm_head; per decoder layer q, k, v, cross k, cross v; per encoder layer q, k, v
    assert released == 1 + 5 * len(decoder.layers) + 3 * len(encoder_layers)
    fused = [p.joined for p in [*decoder.self_qkv, decoder.cross_kv, *(e.qkv for e in encoder_layers)]]
    assert (
        sum(map(count_quantized_linear, [decoder.output, *fused]))
        == len(decoder.layers) + len(encoder_layers) + 2
    )
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
    (short, *_), (long, *_) = translate_ids(int8, ids, options)
    # The stand-in never emits eos before min_new_tokens, so lengths follow the caps.
    assert len(int8.tokenizer(text_target=short)["input_ids"]) < len(
        int8.tokenizer(text_target=long)["input_ids"]
    )


def test_texts_of_several_beam_counts_decode_together_each_as_alone(int8: Translator) -> None:
    """One call may mix beam counts: each runs in its own lane of the served loop."""
    ids = int8.encode(SENTENCES[:2])
    options = [
        GenerationOptions(num_beams=1, max_new_tokens=6),
        GenerationOptions(num_beams=2, max_new_tokens=6),
    ]
    together = translate_ids(int8, ids, options)
    alone = [translate_ids(int8, [row], [option])[0] for row, option in zip(ids, options, strict=True)]
    assert together == alone


def test_runaway_guard_bounds_new_tokens(int8: Translator) -> None:
    config = HandlerConfig(max_new_tokens=100, new_tokens_ratio=1.5, new_tokens_slack=10)
    guarded = DecodePolicy(config, model_beams=4)
    assert guarded.new_token_cap(GenerationOptions(), 9) == 24  # ceil(1.5 x 9) + 10
    assert guarded.new_token_cap(GenerationOptions(), 60) == 100  # 100 > 1.5 x 60 + 10: capped
    assert guarded.new_token_cap(GenerationOptions(max_new_tokens=7), 500) == 7  # the request's own wins


def test_text_over_the_token_limit_is_rejected_not_truncated(tiny_model_dir: Path) -> None:
    translator = Translator.load(tiny_model_dir, HandlerConfig(max_input_tokens=8, warmup=False).model)
    with pytest.raises(OverLimit) as caught:
        translator.encode(["汤姆和他的朋友们在公园喝醉了，然后回家睡觉了。"])
    assert client_error(caught.value).status == 413 and "max_input_tokens (8)" in caught.value.message


def resident_kb_of_files_in(directory: Path) -> int:
    """Rss of this process's maps of files in `directory`, from /proc/self/smaps."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and ":" not in fields[0]:
            inside = len(fields) > 5 and Path(fields[5]).parent == directory.resolve()
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux /proc only")
def test_weight_file_pages_are_dropped_unless_written_through_a_private_map(tmp_path: Path) -> None:
    clean_file, written_file = tmp_path / "clean.safetensors", tmp_path / "written.safetensors"
    for file in (clean_file, written_file):
        file.write_bytes(
            bytes(range(256)) * 4096
        )  # 1 MiB, fresh: dirty in the page cache, as an unpacked .mar
    with clean_file.open("rb") as a, written_file.open("r+b") as b:
        clean = mmap.mmap(a.fileno(), 0, access=mmap.ACCESS_READ)
        written = mmap.mmap(b.fileno(), 0, access=mmap.ACCESS_COPY)  # private: writes never reach the file
        assert sum(clean[::4096]) + sum(written[::4096]) == 0  # every page read, so resident
        written[0] = 7
        assert resident_kb_of_files_in(tmp_path) >= 2048
        assert drop_weight_file_pages(tmp_path) == 1  # MB
        assert resident_kb_of_files_in(tmp_path) >= 1024  # the map with a written page is left alone
        assert clean[4096 * 5 + 3] == 3 and written[0] == 7  # dropped pages come back from the file
        clean.close()
        written.close()


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux /proc only")
def test_int8_load_leaves_no_page_of_the_weight_file_resident(tiny_model_dir: Path, tmp_path: Path) -> None:
    # A copy of its own: an fp32 model loaded in this process keeps its map of the original file.
    model_dir = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    translator = Translator.load(model_dir, HandlerConfig(variant="int8", warmup=False).model)
    assert translator.info.quantized_linear > 0
    assert resident_kb_of_files_in(model_dir) == 0
