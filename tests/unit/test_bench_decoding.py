"""bench.exactness's bookkeeping on hand-made id lists whose answers are counted by hand."""

from __future__ import annotations

from bench import exactness


def test_first_difference_is_the_first_step_where_two_rows_part() -> None:
    assert exactness.first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert exactness.first_difference([5, 2, 3], [1, 2, 3]) == 0
    # One row a prefix of the other: they part where the shorter one ends, whichever it is.
    assert exactness.first_difference([1, 2], [1, 2, 3]) == 2
    assert exactness.first_difference([1, 2, 3], [1, 2]) == 2


def test_changes_counts_rows_that_differ_in_any_token_or_length() -> None:
    alone = [[1, 2], [3, 4], [5], [6, 7]]
    assert exactness.changes(alone, [[1, 2], [3, 4], [5], [6, 7]]) == 0
    assert exactness.changes(alone, [[1, 2], [3, 9], [5, 0], [6, 7]]) == 2


def test_agreement_counts_identical_sentences_equal_tokens_and_the_median_parting_step() -> None:
    int8 = [[1, 2, 3], [4, 5], [7, 8], [1, 1, 1, 1]]
    fp32 = [[1, 2, 3], [4, 6, 7], [9, 8], [1, 1, 1, 2]]
    # Identical: only the first. Positions over the longer row of each pair: 3 + 3 + 2 + 4 = 12; equal
    # tokens: 3 + 1 + 1 + 3 = 8. The three pairs that differ part at steps 1, 0 and 3: median 1.
    assert exactness.agreement(int8, fp32, beams=4) == {
        "beams": 4,
        "sentences": 4,
        "identical_sentences": 1,
        "identical_share": 0.25,
        "token_agreement": 0.6667,
        "median_first_difference_step": 1,
    }


def test_agreement_of_identical_runs_is_whole() -> None:
    rows = [[1, 2, 3], [4, 5]]
    report = exactness.agreement(rows, [list(row) for row in rows], beams=1)
    assert (report["identical_sentences"], report["identical_share"], report["token_agreement"]) == (
        2,
        1.0,
        1.0,
    )
    assert report["median_first_difference_step"] is None


def test_markdown_has_a_line_per_run_agreement_and_peer() -> None:
    result = {
        "runs": [
            {
                "variant": "int8",
                "beams": 4,
                "sentences": 500,
                "differ_from_generate": 2,
                "batch_of_16_changes": 0,
                "batch_of_64_changes": 1,
            }
        ],
        "int8_against_fp32": {
            "note": "stand-in",
            "runs": [{"beams": 4, "sentences": 500, "identical_sentences": 413, "token_agreement": 0.847}],
        },
        "peer_invariance": [
            {
                "engine": "ours int8",
                "beams": 4,
                "tokens_per_sentence": 40,
                "batch_of_16_changes": 0,
                "sentences": 500,
            }
        ],
    }
    assert exactness.markdown(result).splitlines() == [
        "- int8 4 beam(s): 2 of 500 differ from generate(); batches of 16 change 0, of 64 change 1",
        "- int8 against fp32, 4 beam(s): 413 of 500 identical, token agreement 84.7% (stand-in)",
        "- ours int8, 4 beam(s), 40 tokens: batches of 16 change 0 of 500",
    ]
