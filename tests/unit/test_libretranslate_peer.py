"""The LibreTranslate peer: its Argos package, the stand-in sentence splitter, the length launcher.

The package and the launcher's forcing run here on the tiny stand-in with the project's own
CTranslate2; what needs LibreTranslate itself (onnxruntime reading the splitter, Argos installing
the package, a served /translate) runs in its venv and skips, saying how to make it, where that venv
is missing: LibreTranslate is a benchmark peer, not part of `make test`'s install.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests

from bench import libretranslate_launcher, libretranslate_peer, sbd_standin
from bench.load import LoadSpec
from bench.run_all import parse_load
from handlers.text.splitting import sentences_of

LIBRETRANSLATE = libretranslate_peer.venv_python()
needs_libretranslate = pytest.mark.skipif(
    not libretranslate_peer.installed(),
    reason=f"no LibreTranslate {libretranslate_peer.VERSION} venv under build/: make libretranslate-peer",
)


@pytest.fixture(scope="module")
def package(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("argos")
    return libretranslate_peer.build_package(tiny_model_dir, work / "peer", work / "ct2")


def test_the_package_holds_what_argos_loads_and_says_it_is_a_standin(package: Path) -> None:
    root = libretranslate_peer.PACKAGE_NAME
    with zipfile.ZipFile(package) as archive:
        names = set(archive.namelist())
        metadata = json.loads(archive.read(f"{root}/metadata.json"))
        readme = archive.read(f"{root}/README.md").decode()
    for name in (
        "model/model.bin",
        "model/config.json",
        "model/shared_vocabulary.json",
        "sentencepiece.model",
    ):
        assert f"{root}/{name}" in names
    assert f"{root}/minisbd/zh-hans-standin.onnx" in names  # Argos prefers a packaged MiniSBD model
    assert (metadata["from_code"], metadata["to_code"], metadata["type"]) == ("zh", "en", "translate")
    assert "stand-in" in metadata["from_name"] and "random weights" in readme


def test_the_package_is_cached_by_its_conversion(package: Path, tiny_model_dir: Path) -> None:
    built = package.stat().st_mtime_ns
    ct2_dir = package.parent.parent.parent / "ct2"
    assert libretranslate_peer.build_package(tiny_model_dir, package.parent.parent, ct2_dir) == package
    assert package.stat().st_mtime_ns == built
    assert [path.name for path in package.parent.iterdir()] == [package.name]  # no staging left


def test_a_new_splitter_makes_a_new_package(
    package: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sbd_standin, "model_bytes", lambda: b"another splitter")
    ct2_dir = package.parent.parent.parent / "ct2"
    other = libretranslate_peer.build_package(tiny_model_dir, package.parent.parent, ct2_dir)
    assert other != package and other.exists()
    other.unlink()


def test_varints_are_protobufs() -> None:
    """The splitter's file is hand-encoded: its integers must be protobuf's (two's complement too)."""
    assert sbd_standin._varint(1) == b"\x01"
    assert sbd_standin._varint(300) == b"\xac\x02"
    assert sbd_standin._varint(-1) == b"\xff" * 9 + b"\x01"


def test_lengths_are_looked_up_by_the_stripped_text(tmp_path: Path) -> None:
    path = tmp_path / "lengths.json"
    path.write_text(json.dumps({" 我们走吧。": 9, "是那家。\n": 3}, ensure_ascii=False))
    assert libretranslate_launcher.read_lengths(path) == {"我们走吧。": 9, "是那家。": 3}


def _argos_like_apply(pkg: Any, input_text: str, translator: Any) -> list[list[str]]:
    """How Argos's apply_packaged_translation calls CTranslate2 (beam 4, its own options)."""
    tokens = pkg.tokenizer(input_text)["input_ids"]
    source = [pkg.tokenizer.convert_ids_to_tokens(tokens)]
    results = translator.translate_batch(source, beam_size=4, length_penalty=0.2, replace_unknowns=True)
    return [list(result.hypotheses[0]) for result in results]


def test_a_listed_paragraph_decodes_its_reference_length_and_another_decodes_freely(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2")
    from transformers import AutoTokenizer

    from bench import ctranslate2_peer

    converted = ctranslate2_peer.convert(tiny_model_dir, tmp_path)
    translator = ctranslate2.Translator(str(converted), device="cpu", intra_threads=1)

    class Pkg:
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    apply = libretranslate_launcher.forcing(_argos_like_apply, {"我们走吧。": 7, "是那家。": 12})
    for text, tokens in (("我们走吧。", 7), ("是那家。", 12)):
        (hypothesis,) = apply(Pkg(), text, translator)
        assert len(hypothesis) == tokens  # n steps, as min_new_tokens = max_new_tokens = n on our server
    free = _argos_like_apply(Pkg(), "汤姆不会同意的", translator)
    assert apply(Pkg(), "汤姆不会同意的", translator) == free
    assert capsys.readouterr().err.count(libretranslate_launcher.MISSED) == 1


def test_the_rung_speaks_libretranslates_route_at_its_beam_only() -> None:
    assert LoadSpec("http://127.0.0.1:5000", api="libretranslate").path == "/translate"
    assert parse_load("libretranslate-tuned:4:100") == ("libretranslate-tuned", 4, 100)
    with pytest.raises(Exception, match="beam 4 only"):
        parse_load("libretranslate:1:100")


@needs_libretranslate
def test_minisbd_with_the_standin_splits_where_our_server_does(tmp_path: Path) -> None:
    """Equal work: every sentence decodes its text's reference length on both servers, so both must
    cut a text into the same sentences."""
    model = sbd_standin.write_model(tmp_path / "zh-hans-standin.onnx")
    texts = [
        "他说：“我五天前见过她。”",
        "「故事？」妇女问道。「您是什么意思？」",
        "嗯。。。老师说",
        "“这些车是你的吗？”“是的，是我的。”",
        "你好",
        "Tom在哪儿? 我不知道!",
        "我們應該努力；獲得的財富也會煙消雲散。",
    ]
    code = "import json, sys; from minisbd import SBDetect; d = SBDetect(sys.argv[1], use_gpu=False); "
    code += "print(json.dumps([d.sentences(t) for t in json.loads(sys.argv[2])]))"
    out = subprocess.run(
        [str(LIBRETRANSLATE), "-c", code, str(model), json.dumps(texts)],
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = json.loads(out.stdout)
    assert theirs == [[s.strip() for s in sentences_of(text)] for text in texts]
    assert [len(sentences) for sentences in theirs] == [1, 2, 2, 2, 1, 2, 2]


@needs_libretranslate
def test_libretranslate_serves_the_package_with_the_lengths_hook_live(package: Path, tmp_path: Path) -> None:
    setting = libretranslate_peer.SETTINGS["libretranslate-tuned"]
    with libretranslate_peer.serve(setting, package, tmp_path, {"我们走吧。": 11}) as server:
        languages = requests.get(server.url + "/languages", timeout=30).json()
        assert [language["code"] for language in languages] == ["en", "zh-Hans"]
        assert all("stand-in" in language["name"] for language in languages)
        for text in ("我们走吧。", "汤姆不会同意的"):
            body = {"q": text, "source": "zh", "target": "en", "format": "text"}
            answer = requests.post(server.url + "/translate", json=body, timeout=60)
            assert answer.status_code == 200 and answer.json()["translatedText"]
        missed = server.missed_lengths()
    assert len(missed) == 1 and "汤姆不会同意的" in missed[0]  # the listed one was forced, silently
    log = server.log.read_text()
    # Argos logs each batch it decoded at INFO (on as shipped): the listed text decoded 11 tokens.
    decoded = [ast.literal_eval(rows) for rows in re.findall(r"hypotheses=(\[\[.*?\]\]), scores=", log)]
    assert len(decoded) == 2 and len(decoded[0][0]) == 11
    # Nothing fetched: the package index is a local empty list, so the start-up update gives up.
    assert "Cannot update models" in log and "Downloading" not in log
