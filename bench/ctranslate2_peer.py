"""CTranslate2 int8 on the same weights: a peer for bench.latency to measure against, never a serving option.

The model directory is converted at bench time with CTranslate2's Transformers converter (int8) and
cached under build/ct2/<model dir name>-<key>, the key being a digest of the directory's files, the
CTranslate2 version and the quantization, so a rerun skips the conversion and new weights get a new
one. The converter works with transformers 5.23.0 as it is (checked with ctranslate2 4.8.5: its fp32
greedy output matches ours token for token). It drops Marian's `<pad>` row (65001 -> 65000 entries)
and starts the decoder from a zero embedding instead, as the original Marian model does.

Vocabulary map: every conversion carries a map whose always-included line lists every target-side
piece (handlers.model.vocabulary.target_token_ids, the same restriction our output layer makes), as its
users turn on with `use_vmap`; the same converted model serves the rungs without and with it.

Lengths: CTranslate2's max_decoding_length counts the end token and its min_decoding_length counts
the tokens before it, exactly as transformers' max_new_tokens and min_new_tokens do, so a stand-in
forced to min = max = n decodes n steps on both engines (n: reference tokens, eos included).
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from archive.exclusive import exclusive
from bench.common import MODELS_DIR

CACHE_DIR = MODELS_DIR.parent / "ct2"
QUANTIZATION = "int8"
VMAP_NAME = "target_side.vmap"
NOTICE = "peer, not a serving option"
INSTALL_HINT = "pip install -e '.[bench]' (it pins ctranslate2), or pass --no-peer to leave the peer out"


class PeerUnavailable(RuntimeError):
    """CTranslate2 is missing or cannot convert this model; the message says what to do."""


def require() -> ModuleType:
    """The ctranslate2 module, or PeerUnavailable saying how to install it."""
    try:
        return importlib.import_module("ctranslate2")
    except ImportError as error:
        raise PeerUnavailable(f"ctranslate2 is not installed ({error}): {INSTALL_HINT}") from error


def version() -> str:
    return str(require().__version__)


def cache_key(model_dir: Path) -> str:
    """Digest of the model directory's files (names and contents), the CTranslate2 version and int8."""
    digest = hashlib.sha256(f"ctranslate2 {version()} {QUANTIZATION} {VMAP_NAME}\n".encode())
    for file in sorted(path for path in model_dir.iterdir() if path.is_file()):
        digest.update(file.name.encode() + b"\0")
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def cached(model_dir: Path, cache_dir: Path = CACHE_DIR) -> Path | None:
    """The converted model already in the cache for these weights, or None."""
    target = cache_dir / f"{model_dir.name}-{cache_key(model_dir)}"
    return target if (target / "model.bin").exists() else None


def convert(model_dir: Path, cache_dir: Path = CACHE_DIR) -> Path:
    """The converted int8 model directory, converting only when the cache has none for these weights."""
    target = cache_dir / f"{model_dir.name}-{cache_key(model_dir)}"
    with exclusive(cache_dir):  # two test processes may convert the same weights at once
        if not (target / "model.bin").exists():
            _convert(model_dir, cache_dir, target)
    return target


def _convert(model_dir: Path, cache_dir: Path, target: Path) -> None:
    from ctranslate2.converters import TransformersConverter

    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_dir))
    vmap = staging.with_suffix(".vmap")  # beside staging: the converter empties its output directory
    try:  # convert beside the cache entry, then rename: an interrupted conversion leaves no entry
        write_target_side_vmap(model_dir, vmap)
        TransformersConverter(str(model_dir)).convert(
            str(staging), vmap=str(vmap), quantization=QUANTIZATION, force=True
        )
        shutil.rmtree(target, ignore_errors=True)  # a leftover without model.bin
        staging.rename(target)
    except Exception as error:
        raise PeerUnavailable(
            f"CTranslate2 {version()} could not convert {model_dir}: {error}; "
            "pin a ctranslate2 release whose converter supports the installed transformers, "
            "or pass --no-peer"
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        vmap.unlink(missing_ok=True)


def write_target_side_vmap(model_dir: Path, path: Path) -> Path:
    """A CTranslate2 vocabulary map whose one, always-included line lists every target-side piece."""
    from transformers import AutoTokenizer

    from handlers.model.vocabulary import target_token_ids

    tokenizer: Any = AutoTokenizer.from_pretrained(model_dir)
    ids = target_token_ids(tokenizer, excluded=[tokenizer.pad_token_id]).tolist()
    pieces = tokenizer.convert_ids_to_tokens(ids)
    path.write_text("\t" + " ".join(pieces) + "\n", encoding="utf-8")
    return path


def decoding_lengths(reference_tokens: Sequence[int], standin: bool) -> dict[str, int]:
    """A stand-in's forced lengths for one translate_batch call (a batch: its longest); else none."""
    if not standin:
        return {}
    longest = max(reference_tokens)
    return {"min_decoding_length": longest, "max_decoding_length": longest}


class PeerTranslator:
    """CTranslate2's Translator on one CPU thread, tokenized by the model directory's own tokenizer.

    `use_vmap`: restrict the output to the target side, as the conversion's map lists it.
    """

    def __init__(self, model_dir: Path, converted: Path, use_vmap: bool = False) -> None:
        self.use_vmap = use_vmap
        from transformers import AutoTokenizer

        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir)
        self.translator: Any = require().Translator(
            str(converted), device="cpu", compute_type=QUANTIZATION, intra_threads=1, inter_threads=1
        )

    def translate_tokens(self, texts: Sequence[str], beams: int, lengths: dict[str, int]) -> list[list[str]]:
        """Target tokens, end token excluded; CTranslate2's defaults apart from beams and lengths."""
        ids = self.tokenizer(list(texts), padding=False, truncation=False)["input_ids"]
        source = [self.tokenizer.convert_ids_to_tokens(row) for row in ids]  # eos included
        results = self.translator.translate_batch(source, beam_size=beams, use_vmap=self.use_vmap, **lengths)
        return [list(result.hypotheses[0]) for result in results]

    def translate(self, texts: Sequence[str], beams: int, lengths: dict[str, int]) -> list[str]:
        """Detokenized, as our Translator returns them: the same work on both sides of the comparison."""
        rows = self.translate_tokens(texts, beams, lengths)
        ids = [self.tokenizer.convert_tokens_to_ids(tokens) for tokens in rows]
        return list(self.tokenizer.batch_decode(ids, skip_special_tokens=True))
