"""bench.splitters on a handful of paragraphs: the scoring, the case list and the report stay alive."""

from __future__ import annotations

from bench import splitters, splitters_report
from bench.splitter_cases import HARD_CASES
from bench.splitters import Paragraph, candidates, paragraphs, predicted_boundaries, score


def test_paragraphs_concatenate_two_to_eight_sentences_with_true_boundaries() -> None:
    sources = [f"第{i}句。" for i in range(40)]
    paras = paragraphs(sources, seed=3)
    assert paras == paragraphs(sources, seed=3)
    assert all(2 <= len(p.parts) <= 8 for p in paras)
    assert [s for p in paras for s in p.parts] == sources[: sum(len(p.parts) for p in paras)]
    first = paras[0]
    assert first.text == "".join(first.parts)
    assert sorted(first.boundaries) == [len("".join(first.parts[:k])) for k in range(1, len(first.parts))]


def test_scoring_counts_missed_and_extra_boundaries() -> None:
    para = Paragraph(("你好。", "再见！", "好的。"))  # true boundaries at 3 and 6
    missed = predicted_boundaries(para.text, ["你好。再见！", "好的。"])
    extra = predicted_boundaries(para.text, ["你好。", "再", "见！", "好的。"])
    assert missed == {6} and extra == {3, 4, 6}
    result = score([(para, missed), (para, extra)])
    assert (result["tp"], result["fp"], result["fn"]) == (3, 1, 1)
    assert result["precision"] == result["recall"] == 0.75
    assert result["exact_paragraphs"] == 0.0
    # Whitespace a library keeps around its segments does not move the boundary.
    assert predicted_boundaries("A. B.", ["A. ", "B."]) == {3}


def test_single_terminator_paragraphs_exclude_unterminated_and_multi_sentence_parts() -> None:
    assert Paragraph(("你好。", "「真的？」")).single_terminator
    assert not Paragraph(("汤姆不会同意的", "好。")).single_terminator
    assert not Paragraph(("小姐！我觉得不舒服。", "好。")).single_terminator


def test_hard_cases_extend_the_splitter_tests_and_ours_passes_theirs() -> None:
    cands = [c for c in candidates() if c.name == "ours"]
    result = splitters.hard_cases(cands)
    texts = [case["text"] for case in result["cases"]]
    assert texts[: len(HARD_CASES)] == [text for text, _ in HARD_CASES]
    assert len(set(texts)) == len(texts)  # EXTRA_CASES repeats none of them
    assert all(case["passed"]["ours"] for case in result["cases"][: len(HARD_CASES)])
    assert sum(counts["ours"][1] for counts in result["by_class"].values()) == result["total"]


def test_a_small_run_scores_every_splitter_and_renders_the_report() -> None:
    result = splitters.run(seed=0, repeats=1, limit=60)
    assert set(result["splitters"]) == {"ours", "pysbd", "sentencex"}
    for name, r in result["splitters"].items():
        for subset in ("all", "single_terminator"):
            assert 0.0 <= r["tatoeba"][subset]["f1"] <= 1.0, name
        assert r["tatoeba"]["sentences_per_s"] > 0
    ours = result["splitters"]["ours"]["round_trip"]
    assert ours["join_equals_text"] == ours["offsets_exact"] == ours["texts"]
    assert result["winner"] in result["splitters"] and result["why"]
    page = splitters_report.markdown(
        {**result, "date": "today", "machine": {"cpu": "Test CPU", "cores": 2, "python": "3.11"}}
    )
    assert "| ours |" in page and result["command"] in page
