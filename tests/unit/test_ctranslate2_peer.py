"""The CTranslate2 peer: forced lengths match our rungs', the conversion cache, a real tiny conversion."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import ctranslate2_peer, ladder_rungs, latency
from bench.common import Sentence

SENTENCES = [Sentence("汤姆不会同意的", "r", 5), Sentence("我们走吧。", "r", 9), Sentence("是那家。", "r", 3)]


def test_a_standin_is_forced_to_the_reference_length_and_a_batch_to_its_longest() -> None:
    assert ctranslate2_peer.decoding_lengths([7], standin=True) == {
        "min_decoding_length": 7,
        "max_decoding_length": 7,
    }
    assert ctranslate2_peer.decoding_lengths([5, 9, 3], standin=True)["min_decoding_length"] == 9
    assert ctranslate2_peer.decoding_lengths([5, 9, 3], standin=False) == {}  # a real model decodes freely


def test_the_peer_gets_the_same_bounds_as_our_rungs() -> None:
    """CTranslate2's min/max decoding lengths count like min/max_new_tokens (eos in max, not in min)."""
    for group, shared in (([SENTENCES[1]], False), (SENTENCES, True)):
        options = ladder_rungs.options_for(group, 4, True, shared)
        ours = {(o.min_new_tokens, o.max_new_tokens) for o in options}
        peer = ctranslate2_peer.decoding_lengths([s.reference_tokens for s in group], standin=True)
        assert ours == {(peer["min_decoding_length"], peer["max_decoding_length"])}


def test_peer_rungs_translate_the_same_groups_as_ours_with_the_same_lengths() -> None:
    calls: list[tuple[list[str], int, dict[str, int]]] = []

    class FakePeer:
        def translate(self, texts: list[str], beams: int, lengths: dict[str, int]) -> list[str]:
            calls.append((texts, beams, lengths))
            return ["x"] * len(texts)

    ours, peer = ladder_rungs.LADDER[3], ladder_rungs.PEER_RUNGS[1]
    sentences = SENTENCES * 7  # 21: a full batch and a partial one
    assert ladder_rungs.groups_of(peer, sentences) == ladder_rungs.groups_of(ours, sentences)
    assert [len(group) for group in ladder_rungs.groups_of(peer, sentences)] == [ladder_rungs.BATCH, 5]
    for group in ladder_rungs.groups_of(peer, sentences):
        ladder_rungs.run_peer_group(FakePeer(), group, 4, standin=True)
    assert [(len(texts), beams, lengths["max_decoding_length"]) for texts, beams, lengths in calls] == [
        (16, 4, 9),
        (5, 4, 9),
    ]


def _copy(model_dir: Path, to: Path) -> Path:
    shutil.copytree(model_dir, to)
    return to


def test_the_cache_key_follows_the_files_and_the_ctranslate2_version(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = _copy(tiny_model_dir, tmp_path / "standin-tiny")
    key = ctranslate2_peer.cache_key(copy)
    assert key == ctranslate2_peer.cache_key(tiny_model_dir)  # contents, not where the directory is
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n")
    assert ctranslate2_peer.cache_key(copy) != key
    monkeypatch.setattr(ctranslate2_peer, "version", lambda: "0.0.0")
    assert ctranslate2_peer.cache_key(tiny_model_dir) != key


def test_a_real_conversion_is_cached_and_translates_to_the_forced_lengths(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ctranslate2_peer.cached(tiny_model_dir, tmp_path) is None
    converted = ctranslate2_peer.convert(tiny_model_dir, tmp_path)
    assert converted.parent == tmp_path and (converted / "model.bin").exists()
    assert ctranslate2_peer.cached(tiny_model_dir, tmp_path) == converted
    assert [path.name for path in tmp_path.iterdir()] == [converted.name]  # no staging left behind

    import ctranslate2.converters

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(ctranslate2.converters, "TransformersConverter", refuse)
    assert ctranslate2_peer.convert(tiny_model_dir, tmp_path) == converted

    peer = ctranslate2_peer.PeerTranslator(tiny_model_dir, converted)
    texts = [s.source for s in SENTENCES]
    for beams in (1, 4):
        single = ctranslate2_peer.decoding_lengths([7], standin=True)
        assert [len(row) for row in peer.translate_tokens(texts[:1], beams, single)] == [7]
        batch = ctranslate2_peer.decoding_lengths([s.reference_tokens for s in SENTENCES], standin=True)
        assert [len(row) for row in peer.translate_tokens(texts, beams, batch)] == [9, 9, 9]
    assert all(isinstance(text, str) and text for text in peer.translate(texts, 1, single))


def test_a_failed_conversion_says_what_to_do(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    with pytest.raises(ctranslate2_peer.PeerUnavailable, match="--no-peer"):
        ctranslate2_peer.convert(empty, tmp_path / "cache")
    assert not any((tmp_path / "cache").iterdir())


def test_without_ctranslate2_the_ladder_leaves_the_peer_out_and_says_how_to_install_it(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert latency.prepare_peer(tiny_model_dir, no_peer=True) == ({"skipped": "--no-peer"}, None)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 now raises ImportError
    with pytest.raises(ctranslate2_peer.PeerUnavailable, match=r"pip install -e '\.\[bench\]'"):
        ctranslate2_peer.require()
    peer, converted = latency.prepare_peer(tiny_model_dir, no_peer=False)
    assert converted is None and "not installed" in peer["skipped"]
    assert "rungs 6-7 (CTranslate2 peer) left out" in capsys.readouterr().err


def test_the_conversion_carries_the_target_side_map_and_use_vmap_keeps_to_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    from handlers.model.vocabulary import target_token_ids

    converted = ctranslate2_peer.convert(tiny_model_dir, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    target_side = set(tokenizer.convert_ids_to_tokens(target_token_ids(tokenizer).tolist()))
    assert (converted / "vmap.txt").read_text(encoding="utf-8").split("\t")[1].split() == sorted(
        tokenizer.convert_ids_to_tokens(target_token_ids(tokenizer, [tokenizer.pad_token_id]).tolist()),
        key=tokenizer.convert_tokens_to_ids,
    )
    texts = [s.source for s in SENTENCES]
    mapped = ctranslate2_peer.PeerTranslator(tiny_model_dir, converted, use_vmap=True)
    free = ctranslate2_peer.PeerTranslator(tiny_model_dir, converted)
    lengths = {"min_decoding_length": 12, "max_decoding_length": 12}
    mapped_tokens = {t for row in mapped.translate_tokens(texts, 2, lengths) for t in row}
    free_tokens = {t for row in free.translate_tokens(texts, 2, lengths) for t in row}
    assert mapped_tokens <= target_side and mapped_tokens
    print(f"without the map {len(free_tokens - target_side)} emitted tokens are outside the target side")
