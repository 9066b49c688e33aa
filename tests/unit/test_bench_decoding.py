"""Smoke runs of the decoding benchmarks on the tiny stand-in: they run, write results, report figures."""

from __future__ import annotations

import json
from pathlib import Path

from bench import exactness, profile, row_budget


def test_exactness_reports_differences_invariance_agreement_and_the_peer(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ["--model", str(tiny_model_dir), "--sentences", "6", "--beams", "4", "--peer-length", "8"]
    assert exactness.main([*args, "--results-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "exactness.json").read_text())
    for run in result["runs"]:
        assert run["sentences"] == 6 and run["differ_from_generate"] == len(run["first_difference_at_step"])
        assert run["batch_of_16_changes"] == run["batch_of_64_changes"] == 0  # per-row int8 included
    (agreement,) = result["int8_against_fp32"]["runs"]
    # The figures agree with each other: all 6 identical exactly when every token agrees.
    identical = agreement["identical_sentences"]
    assert agreement["identical_share"] == round(identical / 6, 4)
    assert (identical == 6) == (agreement["token_agreement"] == 1.0)
    assert (identical == 6) == (agreement["median_first_difference_step"] is None)
    assert "not quality" in result["int8_against_fp32"]["note"]
    assert [p["engine"].split()[0] for p in result["peer_invariance"]] == ["CTranslate2", "ours"]
    assert result["peer_invariance"][1]["batch_of_16_changes"] == 0


def test_agreement_counts_equal_tokens_over_the_longer_row() -> None:
    report = exactness.agreement([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6, 7]], beams=1)
    assert report["identical_sentences"] == 1 and report["token_agreement"] == round(4 / 6, 4)
    assert report["median_first_difference_step"] == 1


def test_row_budget_curve_is_written_and_plotted(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--sentences", "8", "--budgets", "4", "16", "--beams", "4"]
    assert row_budget.main([*args, "--results-dir", str(tmp_path)]) == 0
    curve = json.loads((tmp_path / "row_budget.json").read_text())["curves"]["4"]
    assert [r["max_batch_rows"] for r in curve] == [4, 16] and all(r["sentences_per_s"] > 0 for r in curve)
    assert (tmp_path / "row_budget.png").stat().st_size > 0


def test_profile_keeps_the_top_operators(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["--model", str(tiny_model_dir), "--batch", "2", "--top", "5", "--results-dir", str(tmp_path)]
    assert profile.main(args) == 0
    text = (tmp_path / "profile-fast-int8-beam4-batch2.txt").read_text()
    assert "quantized::linear_dynamic" in text and "Self CPU" in text
    assert f"# python -m bench.profile --model {tiny_model_dir} --batch 2" in text  # its signature


def test_int8_kernels_checks_the_chosen_kernel_and_tables_every_kernel() -> None:
    from bench import int8_kernels

    assert int8_kernels.per_row_invariant()
    row = {"rows": 1, "in": 512, "out": 512, **{name: 10.0 for name in int8_kernels.KERNELS}, "per_row": 15.0}
    assert int8_kernels.markdown([row]).splitlines()[-1].endswith("| 1.50 |")
