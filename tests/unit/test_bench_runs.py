"""In-process benchmark runs on the tiny stand-in (`make bench-check`): each runs whole against the
current handler code, and what it reports holds where the answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bleu, exactness, profile

pytestmark = pytest.mark.bench_check


def test_exactness_finds_no_difference_from_generate_and_no_batch_dependence(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ["--model", str(tiny_model_dir), "--sentences", "6", "--beams", "4", "--peer-length", "8"]
    assert exactness.main([*args, "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "exactness.json").read_text())
    assert [(run["variant"], run["beams"]) for run in result["runs"]] == [("int8", 4), ("fp32", 4)]
    for run in result["runs"]:
        # The fast decoder gives generate()'s ids, and per-row int8 makes a batch change nothing.
        assert (run["sentences"], run["differ_from_generate"], run["first_difference_at_step"]) == (6, 0, [])
        assert run["batch_of_16_changes"] == run["batch_of_64_changes"] == 0
    (agreement,) = result["int8_against_fp32"]["runs"]
    assert agreement["sentences"] == 6 and 0 <= agreement["identical_sentences"] <= 6
    assert "not quality" in result["int8_against_fp32"]["note"]
    assert [p["engine"].split()[0] for p in result["peer_invariance"]] == ["CTranslate2", "ours"]
    assert result["peer_invariance"][1]["batch_of_16_changes"] == 0


def test_profile_keeps_the_top_operators(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--batch", "2", "--top", "5", "--results-dir", str(tmp_path)]
    assert profile.main(args) == 0
    text = (tmp_path / "profile-fast-int8-beam4-batch2.txt").read_text()
    assert "Self CPU" in text
    if not _int8_linear_holds_the_matmuls():
        # fbgemm's int8 matmul, told its input's scale (handlers.model.row_int8.unit_scale_product)
        assert "quantized::linear_with_input_q_dq" in text
    assert f"# python -m bench.profile --model {tiny_model_dir} --batch 2" in text  # its signature


def test_bleu_in_process_on_the_tiny_standin_is_labeled_meaningless(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--model-dir", str(tiny_model_dir), "--variant", "int8", "--limit", "8", "--num-beams", "1"]
    assert bleu.main([*args, "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bleu-standin-int8.json").read_text())
    assert result["standin"] is True and result["meaningful"] is False and result["n"] == 8
    assert result["variant"] == "int8"
    assert "MEANINGLESS" in capsys.readouterr().err


def test_bleu_through_the_batch_job_scores_what_the_archive_translates(
    tiny_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--archive", str(tiny_store / "zh_en_int8.mar"), "--limit", "8", "--num-beams", "1"]
    assert bleu.main([*args, "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bleu-standin-int8.json").read_text())
    assert result["standin"] is True and result["meaningful"] is False and result["n"] == 8
    assert result["variant"] == "int8" and result["version"]
    assert "MEANINGLESS" in capsys.readouterr().err


def test_hot_path_sets_ours_beside_ctranslate2(tiny_model_dir: Path, tmp_path: Path) -> None:
    from bench import hot_path

    args = ["--model", str(tiny_model_dir), "--sentences", "2", "--repeats", "1", "--kernels", "auto,generic"]
    assert hot_path.main([*args, "--ghz", "3.0", "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "hot-path.json").read_text())
    shapes = [(row["shape"], row["beams"]) for row in result["rows"]]
    assert shapes == [("batch of 16", 1), ("batch of 16", 4), ("one sentence", 1), ("one sentence", 4)]
    assert all(set(row["sentences_per_s"]) == {"ours", "ours:generic", "ct2+map"} for row in result["rows"])
    assert result["kernels_by_engine"]["ours:generic"].startswith("generic (int8 matmuls: fbgemm")
    assert result["signature"]["command"].startswith("python -m bench.hot_path --model")
    assert "| ours / CT2 + map | ours:generic / CT2 + map |" in hot_path.table(result)
    assert (tmp_path / "hot-path.md").read_text() == hot_path.table(result) + "\n"
    # --ghz: batches of 16 (not one sentence) set against the roof, for each of ours, not CT2.
    assert [("roof" in row) for row in result["rows"]] == [True, True, False, False]
    assert set(result["rows"][0]["roof"]) == {"ours", "ours:generic"}
    assert result["rows"][0]["roof"]["ours:generic"]["path"] == "generic"
    assert "| ours:generic | 1 | generic |" in hot_path.table(result)


def _int8_linear_holds_the_matmuls() -> bool:
    """Whether this host's C kernels (auto) run the int8 layers, so that fbgemm's matmul never shows."""
    from handlers.model import native

    kernels = native.load("auto")
    return kernels is not None and kernels.int8_linear is not None
