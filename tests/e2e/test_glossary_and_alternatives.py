"""Glossaries and alternatives on a real TorchServe: an archive whose yaml names a deployment
glossary (packed by the real archiver), request entries over it, alternatives in the native and
v2 shapes, and the GlossaryHits metric. The tiny stand-in's words are noise, so only where terms
land and how many answers come back are checked, never wording."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from archive.build import CONFIG_DIR, ArchiveSpec, build_archive, model_digest
from serving.torchserve import TorchServe
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

TERMS = "汤姆\tTOM-FROM-FILE\n公园\tPARK-FROM-FILE\n"


@pytest.fixture(scope="module")
def glossary_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServe]:
    config_dir = tmp_path_factory.mktemp("config")
    config = yaml.safe_load((CONFIG_DIR / "zh_en_int8.yaml").read_text())
    config["handler"]["glossary_file"] = "terms.tsv"
    (config_dir / "zh_en_int8.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (config_dir / "terms.tsv").write_text(TERMS, encoding="utf-8")
    shutil.copy2(CONFIG_DIR / "metrics.yaml", config_dir / "metrics.yaml")
    store = tmp_path_factory.mktemp("store")
    build_archive(ArchiveSpec("int8", tiny_model_dir, store, config_dir), model_digest(tiny_model_dir))
    with TorchServe(store, tmp_path_factory.mktemp("torchserve")) as running:
        yield running


def test_deployment_terms_apply_and_request_terms_win(glossary_server: TorchServe) -> None:
    response = glossary_server.client.translate("汤姆在公园。", glossary={"公园": "PARK-FROM-REQUEST"})
    assert response.status_code == 200, response.text
    translation = response.json()["translation"]
    assert translation.count("TOM-FROM-FILE") == 1 and translation.count("PARK-FROM-REQUEST") == 1
    assert "PARK-FROM-FILE" not in translation and "公园" not in translation


def test_glossary_hits_reach_the_metrics_port(glossary_server: TorchServe) -> None:
    def hits() -> float:
        metrics = requests.get(f"{glossary_server.client.endpoints.metrics}/metrics", timeout=30).text
        return sum(map(float, re.findall(r'^GlossaryHits\{Variant="int8".*\} ([0-9.]+)$', metrics, re.M)))

    before = hits()
    assert glossary_server.client.translate("汤姆和汤姆。").status_code == 200
    # The frontend reads worker metrics from their log stream.
    wait_until(lambda: hits() >= before + 2, 30, lambda: f"glossary hits {hits()} < {before} + 2", 0.5)


def test_alternatives_in_the_native_shape(glossary_server: TorchServe) -> None:
    body = glossary_server.client.translate(["是那家。", "他不会同意的。是那家。"], alternatives=2).json()
    first, several = body["alternatives"]
    assert 1 <= len(first) <= 2 and body["translations"][0] not in first
    assert several == [] and [w["code"] for w in body["warnings"]] == ["alternatives_single_sentence"]
    too_many = glossary_server.client.translate("是那家。", alternatives=4)
    assert too_many.status_code == 422 and "below the beam count (4)" in too_many.json()["message"]


def test_alternatives_are_a_second_v2_output(glossary_server: TorchServe) -> None:
    request = {
        "inputs": [
            {"name": "text", "shape": [2], "datatype": "BYTES", "data": ["是那家。", "汤姆不会同意的。"]}
        ],
        "parameters": {"alternatives": 2},
    }
    response = glossary_server.client.session.post(
        f"{glossary_server.client.endpoints.inference}/v2/models/zh_en/infer",
        json=request,
        headers=glossary_server.client._headers("inference"),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    translation, alternatives = response.json()["outputs"]
    assert translation["name"] == "translation" and alternatives["name"] == "alternatives"
    rows, width = alternatives["shape"]
    assert rows == 2 and 1 <= width <= 2 and len(alternatives["data"]) == rows * width
