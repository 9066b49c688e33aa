"""The sentences the invariance tests share, each decoded alone: the reference every schedule must match.

test_batch_invariance and test_step_scheduler compare batched and scheduled decodes with the same
200 sentences of the lively tiny stand-in decoded one at a time, with the same caps. Those alone
decodes are most of both tests' time, so one session computes each (variant, beams) once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.common import sample_sentences
from handlers.handler_config import HandlerConfig, Variant
from handlers.model.search import RowLimits
from handlers.model.translator import Translator
from handlers.scheduling.run import decode_ids

SENTENCES = 200


def row_limits(ids: list[list[int]]) -> list[RowLimits]:
    """Each sentence's cap: room for its ending at varied lengths, at most 40 tokens."""
    return [RowLimits(min(40, 2 * len(row) + 10)) for row in ids]


def decode(
    translator: Translator, ids: list[list[int]], limits: list[RowLimits], beams: int
) -> list[list[int]]:
    """Each sentence's best hypothesis, `ids` submitted together to the served loop."""
    return [ranked[0] for ranked in decode_ids(translator, ids, limits, beams)]


@dataclass(frozen=True)
class Reference:
    ids: list[list[int]]
    limits: list[RowLimits]
    alone: list[list[int]]


def load(model_dir: Path, variant: Variant) -> Translator:
    return Translator.load(model_dir, HandlerConfig(variant=variant, warmup=False).model)


class AloneDecodes:
    """Per (variant, beams): the sentences' ids, caps and alone decodes on `model_dir`, made on first use
    by a translator of its own (so no test's translator state can leak into the reference)."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._references: dict[tuple[Variant, int], Reference] = {}

    def __call__(self, variant: Variant, beams: int) -> Reference:
        key = (variant, beams)
        if key not in self._references:
            translator = load(self.model_dir, variant)
            ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, SENTENCES)])
            limits = row_limits(ids)
            pairs = zip(ids, limits, strict=True)
            alone = [decode(translator, [row], [limit], beams)[0] for row, limit in pairs]
            self._references[key] = Reference(ids, limits, alone)
        return self._references[key]
