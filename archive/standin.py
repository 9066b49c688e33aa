"""The offline stand-in for Helsinki-NLP/opus-mt-zh-en, for machines that cannot reach the hub.

A MarianMTModel with the real model's architecture (full) or a miniature of it
(tiny), seeded random weights, and real SentencePiece models trained on the
test-set text, so that tokenization, shapes and timings are those of the real
model. Its output is NOT a translation: `standin.json` next to the weights
makes the handler label every response.
"""

from __future__ import annotations

import io
import json
import random
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import sentencepiece as spm

from archive.exclusive import exclusive
from archive.tatoeba import DEFAULT_TEST_FILE, read_blocks
from handlers.model.standin_marker import STANDIN_MARKER, STANDIN_NOTICE

if TYPE_CHECKING:
    from transformers import MarianConfig

Size = Literal["full", "tiny"]

VOCAB_SIZE = 65001  # opus-mt-zh-en: 65000 pieces plus <pad>
PAD_ID = 65000  # also the decoder start token, as in the real model
EOS_ID = 0
SPM_PIECES = 8000  # trained per side; the test set is too small for the real 32k
# The real opus-mt-zh-en's target.spm has about 32k pieces: the stand-in's target side is padded to
# that size so the target-side output layer (handlers.model.vocabulary) does the same work on both.
TARGET_PIECES = 32000

# Architecture of opus-mt-zh-en; the tiny variant shrinks only the sizes.
ARCHITECTURE: dict[Size, dict[str, int]] = {
    "full": {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048},
    "tiny": {"d_model": 32, "layers": 1, "heads": 2, "ffn": 64},
}
FORMAT_VERSION = 3  # bump when the stand-in's recipe changes, to invalidate caches


def standin_config(size: Size) -> MarianConfig:
    from transformers import MarianConfig  # here, not at the top: a built stand-in needs no transformers

    arch = ARCHITECTURE[size]
    return MarianConfig(
        vocab_size=VOCAB_SIZE,
        decoder_vocab_size=VOCAB_SIZE,
        d_model=arch["d_model"],
        encoder_layers=arch["layers"],
        decoder_layers=arch["layers"],
        encoder_attention_heads=arch["heads"],
        decoder_attention_heads=arch["heads"],
        encoder_ffn_dim=arch["ffn"],
        decoder_ffn_dim=arch["ffn"],
        activation_function="swish",
        max_position_embeddings=512,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=EOS_ID,
        decoder_start_token_id=PAD_ID,
        forced_eos_token_id=EOS_ID,
    )


def build_standin(
    out_dir: Path, size: Size = "full", seed: int = 0, test_file: Path = DEFAULT_TEST_FILE
) -> Path:
    """Write a loadable model directory to out_dir; reuse it when already built with the same recipe."""
    recipe = {"format": FORMAT_VERSION, "size": size, "seed": seed, "corpus": test_file.name}
    marker = out_dir / STANDIN_MARKER
    with exclusive(out_dir.parent):  # two test processes may ask for it at once; the marker is written last
        if not (marker.exists() and json.loads(marker.read_text()).get("recipe") == recipe):
            _build(out_dir, size, seed, test_file, recipe)
    return out_dir


def _build(out_dir: Path, size: Size, seed: int, test_file: Path, recipe: dict[str, str | int]) -> None:
    import torch
    from transformers import GenerationConfig, MarianMTModel, MarianTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    blocks = read_blocks(test_file)
    _train_spm([b.source for b in blocks], out_dir / "source.spm", seed)
    _train_spm([line for b in blocks for line in (b.reference, b.published)], out_dir / "target.spm", seed)
    _pad_spm(out_dir / "target.spm", TARGET_PIECES)
    _write_vocab(out_dir)
    MarianTokenizer(
        source_spm=str(out_dir / "source.spm"),
        target_spm=str(out_dir / "target.spm"),
        vocab=str(out_dir / "vocab.json"),
    ).save_pretrained(out_dir)
    torch.manual_seed(seed)
    model = MarianMTModel(standin_config(size))
    model.generation_config = GenerationConfig(
        bad_words_ids=[[PAD_ID]],
        bos_token_id=EOS_ID,
        decoder_start_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        forced_eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        max_length=512,
        num_beams=4,
    )
    model.save_pretrained(out_dir)
    name = f"offline stand-in for opus-mt-zh-en ({size}, random weights)"
    marker = out_dir / STANDIN_MARKER
    marker.write_text(json.dumps({"name": name, "notice": STANDIN_NOTICE, "recipe": recipe}, indent=2) + "\n")


def _train_spm(lines: list[str], path: Path, seed: int) -> None:
    shuffled = list(lines)
    random.Random(seed).shuffle(shuffled)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(shuffled),
        model_writer=model,
        vocab_size=SPM_PIECES,
        hard_vocab_limit=False,
        character_coverage=0.9995,
        model_type="unigram",
        num_threads=1,
        minloglevel=2,
    )
    path.write_bytes(model.getvalue())


def _pad_spm(path: Path, pieces: int) -> None:
    """Append never-preferred pieces (`▁standin_<n>`, lowest score) until the model has `pieces`.

    A SentencePiece model is a protobuf whose field 1 repeats one message per piece; appended
    field-1 records extend that list, so no protobuf library is needed.
    """
    processor = spm.SentencePieceProcessor(model_file=str(path))
    count = processor.get_piece_size()
    lowest = min(processor.get_score(i) for i in range(count)) - 1.0
    extra = bytearray()
    for n in range(pieces - count):
        text = f"▁standin_{n}".encode()
        piece = b"\x0a" + _varint(len(text)) + text + b"\x15" + struct.pack("<f", lowest)
        extra += b"\x0a" + _varint(len(piece)) + piece
    path.write_bytes(path.read_bytes() + bytes(extra))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _write_vocab(out_dir: Path) -> None:
    """The joint 65001-entry vocabulary: eos 0, unk 1, source then target pieces, fillers, pad last."""
    vocab: dict[str, int] = {"</s>": 0, "<unk>": 1}
    for name in ("source.spm", "target.spm"):
        processor = spm.SentencePieceProcessor(model_file=str(out_dir / name))
        for index in range(processor.get_piece_size()):
            if not (processor.is_control(index) or processor.is_unknown(index)):
                vocab.setdefault(processor.id_to_piece(index), len(vocab))
    filler = 0
    while len(vocab) < PAD_ID:
        vocab[f"<standin_unused_{filler}>"] = len(vocab)
        filler += 1
    vocab["<pad>"] = PAD_ID
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n")
