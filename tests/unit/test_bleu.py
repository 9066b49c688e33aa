"""Quality benchmark: sacrebleu reproduces the published figures and scores known texts as it must
(the stand-in's run, labeled meaningless, is a smoke run in tests/unit/test_bench_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bleu


def test_published_outputs_reproduce_the_published_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bleu.main(["--published", "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bleu-published.json").read_text())
    assert (result["bleu"], result["chrf"]) == (36.12, 54.81)
    assert result["n"] == 10000 and result["meaningful"] is True
    assert result["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert result["signature"]["command"] == f"python -m bench.bleu --published --results-dir {tmp_path}"
    assert "BLEU 36.12  chrF 54.81" in capsys.readouterr().out


def test_score_is_perfect_on_the_references_and_low_on_noise() -> None:
    references = ["Tom won't approve.", "I'd like to see a doctor."]
    assert bleu.score(references, references)["bleu"] == 100.0
    assert bleu.score(["banana banana", "xyz"], references)["bleu"] < 5
