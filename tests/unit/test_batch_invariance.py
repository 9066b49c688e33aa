"""A sentence's ids never depend on what it was decoded beside: alone, in batches of 16, in 64-row units.

On the lively tiny stand-in (outputs vary with the input and end at varied lengths), 200 test
sentences of mixed lengths, fp32 and int8, greedy and beam 4. Batches of 16 are taken in test-set
order, so their members differ in length and padding; units come from plan_units, as the server
cuts them. int8 gets this from per-row activation ranges (handlers.model.row_int8), both variants from
padding each sentence by its own length only (handlers.model.batching, handlers.model.cross_attention).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from handlers.handler_config import Variant
from handlers.model.batching import plan_units
from tests.alone_decodes import SENTENCES, AloneDecodes, decode, load


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
        in_units: list[list[int]] = [[] for _ in ids]
        for unit in plan_units([len(row) for row in ids], [beams] * len(ids), max_rows=64):
            outputs = decode(translator, [ids[i] for i in unit], [limits[i] for i in unit], beams)
            for index, output in zip(unit, outputs, strict=True):
                in_units[index] = output
        differ_16 = [i for i in range(SENTENCES) if in_sixteens[i] != alone[i]]
        differ_64 = [i for i in range(SENTENCES) if in_units[i] != alone[i]]
        print(
            f"{variant} beams={beams}: batches of 16 change {len(differ_16)}, 64-row units {len(differ_64)}"
        )
        assert differ_16 == [], f"{variant} beam {beams}: batches of 16 change sentences {differ_16[:8]}"
        assert differ_64 == [], f"{variant} beam {beams}: 64-row units change sentences {differ_64[:8]}"
