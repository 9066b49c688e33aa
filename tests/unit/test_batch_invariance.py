"""A sentence's ids never depend on what it was decoded beside: alone, 16 at a time, all at once.

On the lively tiny stand-in (outputs vary with the input and end at varied lengths), 200 test
sentences of mixed lengths, fp32 and int8, greedy and beam 4, each decoded through the served loop
(handlers.scheduling.run). Batches of 16 are taken in test-set order, so their members differ in
length and padding; all 200 at once fill the 64-row budget and join it cohort by cohort as rows
free up, as a partition runs them. int8 gets this from per-row activation ranges
(handlers.model.row_int8), both variants from padding each sentence by its own length only
(handlers.model.batching, handlers.model.cross_attention).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from handlers.handler_config import Variant
from tests.alone_decodes import SENTENCES, AloneDecodes, decode, load

pytestmark = pytest.mark.long(seconds=93)  # seconds: make test starts the longest first


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_a_sentence_decodes_the_same_alone_and_in_any_batch(
    lively_model_dir: Path, alone_decodes: AloneDecodes, variant: Variant
) -> None:
    translator = load(lively_model_dir, variant)
    for beams in (1, 4):
        reference = alone_decodes(variant, beams)
        ids, limits, alone = reference.ids, reference.limits, reference.alone
        assert len({len(row) for row in ids}) > 10, "the sample must mix lengths"
        assert len({len(out) for out in alone}) > 3, "the model must end sentences at varied lengths"
        in_sixteens: list[list[int]] = []
        for start in range(0, SENTENCES, 16):
            in_sixteens += decode(translator, ids[start : start + 16], limits[start : start + 16], beams)
        at_once = decode(translator, ids, limits, beams)
        differ_16 = [i for i in range(SENTENCES) if in_sixteens[i] != alone[i]]
        differ_all = [i for i in range(SENTENCES) if at_once[i] != alone[i]]
        print(
            f"{variant} beams={beams}: batches of 16 change {len(differ_16)}, all at once {len(differ_all)}"
        )
        assert differ_16 == [], f"{variant} beam {beams}: batches of 16 change sentences {differ_16[:8]}"
        assert differ_all == [], f"{variant} beam {beams}: all at once changes sentences {differ_all[:8]}"
