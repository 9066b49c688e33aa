"""bench.bleu through a real TorchServe: identity and the stand-in label come from the responses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bleu
from serving.torchserve import TorchServe

pytestmark = [pytest.mark.e2e, pytest.mark.bench_check]  # `make bench-check`


def test_bleu_through_the_endpoint(server: TorchServe, tmp_path: Path) -> None:
    url = f"{server.client.endpoints.inference}/predictions/zh_en"
    args = ["--endpoint", url, "--key-file", str(server.key_file), "--limit", "20", "--num-beams", "1"]
    assert bleu.main([*args, "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bleu-endpoint.json").read_text())
    assert result["n"] == 20 and result["version"] == "1.0-int8" and result["variant"] == "int8"
    assert result["standin"] is True and result["meaningful"] is False
