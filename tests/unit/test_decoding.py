"""The fast decoder against generate(): the same token ids, on 300 test sentences, fp32 and int8.

The reference is generate() with every non-target id suppressed (its final_logits_bias set to
-inf there), which is what restricting the output layer means. Each sentence is decoded alone
by both, the fast decoder through the served loop (handlers.scheduling.run): generate() pads a
batch to its longest member, so only alone do the two see the same inputs
(tests/unit/test_batch_invariance.py holds the served loop to many sentences at once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from bench.common import sample_sentences
from handlers.handler_config import HandlerConfig
from handlers.model.batching import pad_batch
from handlers.model.decoding import FastDecoder, GenerateDecoder, RowLimits, SearchRules, make_decoder
from handlers.model.translator import Translator
from handlers.scheduling.run import decode_ids

SENTENCES = 300


pytestmark = pytest.mark.long(seconds=145)  # seconds: make test starts the longest first


def limits_for(index: int, row: list[int]) -> RowLimits:
    """Short caps keep the reference fast; every third sentence also has a minimum length."""
    return RowLimits(min(8, len(row) + 2), 2 if index % 3 == 0 else 0)


@dataclasses.dataclass
class Pair:
    translator: Translator
    fast: FastDecoder
    reference: GenerateDecoder
    ids: list[list[int]]

    def alone(self, count: int = SENTENCES) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[RowLimits]]]:
        """The first `count` sentences, each as a batch of its own: input ids, mask and its cap."""
        for index, row in enumerate(self.ids[:count]):
            input_ids, mask = pad_batch([row], self.translator.tokenizer.pad_token_id)
            yield input_ids, mask, [limits_for(index, row)]

    def served(self) -> Translator:
        """The translator with the fast decoder: what the served loop decodes with."""
        t = self.translator
        return Translator(t.model, t.tokenizer, t.config, t.info, self.fast)

    def decode_alone(
        self, decoder: FastDecoder | GenerateDecoder, beams: int, count: int = SENTENCES
    ) -> list[list[int]]:
        return [ranked[0] for ranked in self.ranked_alone(decoder, beams, 1, count)]

    def decode_alone_ranked(self, decoder: FastDecoder | GenerateDecoder) -> list[list[list[int]]]:
        """Beam 4, each sentence alone: its finished hypotheses, best first."""
        return self.ranked_alone(decoder, 4, 4, SENTENCES)

    def ranked_alone(
        self, decoder: FastDecoder | GenerateDecoder, beams: int, keep: int, count: int
    ) -> list[list[list[int]]]:
        if isinstance(decoder, GenerateDecoder):
            return [decoder.generate(*inputs, beams, keep)[0] for inputs in self.alone(count)]
        served = self.served()
        limits = [limits_for(index, row) for index, row in enumerate(self.ids[:count])]
        return [
            decode_ids(served, [row], [limit], beams, keep)[0]
            for row, limit in zip(self.ids[:count], limits, strict=True)
        ]


def make_pair(model_dir: Path, variant: str) -> Pair:
    # One load: the reference runs generate() on the model, and a fast decoder is built over it
    # (make_decoder leaves the model whole; only a server's load releases what it copied).
    config = HandlerConfig(variant=variant, decoder="generate", warmup=False)  # type: ignore[arg-type]
    translator = Translator.load(model_dir, config.model)
    model = translator.model
    fast = make_decoder("fast", model, translator.tokenizer)
    assert isinstance(fast, FastDecoder)
    suppressed = torch.ones(model.final_logits_bias.shape[-1], dtype=torch.bool)
    suppressed[fast.output.ids] = False
    model.final_logits_bias[0, suppressed] = -torch.inf
    reference = GenerateDecoder(model, fast.rules)
    sentences = sample_sentences(translator.tokenizer, SENTENCES)
    return Pair(translator, fast, reference, translator.encode([s.source for s in sentences]))


@pytest.fixture(scope="module", params=["fp32", "int8"])
def pair(request: pytest.FixtureRequest, lively_model_dir: Path) -> Pair:
    return make_pair(lively_model_dir, request.param)


def test_greedy_fast_decoder_gives_the_ids_of_generate(pair: Pair) -> None:
    fast = pair.decode_alone(pair.fast, 1)
    reference = pair.decode_alone(pair.reference, 1)
    assert_same_ids(pair, fast, reference)


def test_beam_search_gives_generates_hypotheses_best_first(pair: Pair) -> None:
    """Beam 4: a sentence's finished hypotheses, best first, are generate()'s num_return_sequences,
    so the best (what a request without alternatives is answered) is generate()'s answer."""
    fast = pair.decode_alone_ranked(pair.fast)
    reference = pair.decode_alone_ranked(pair.reference)
    assert_same_ids(pair, [ranked[0] for ranked in fast], [ranked[0] for ranked in reference])
    assert all(len(ranked) == 4 and len({tuple(ids) for ids in ranked}) == 4 for ranked in fast)
    differ = [i for i, (a, b) in enumerate(zip(fast, reference, strict=True)) if a != b]
    assert differ == [], f"{len(differ)} sentences rank their hypotheses differently: {differ[:5]}"
    # generate() asked for one sequence gives the first of its ranked ones.
    assert pair.decode_alone(pair.reference, 4, count=20) == [ranked[0] for ranked in reference[:20]]


def assert_same_ids(pair: Pair, fast: list[list[int]], reference: list[list[int]]) -> None:
    differ = [i for i, (a, b) in enumerate(zip(fast, reference, strict=True)) if a != b]
    lengths = {len(ids) for ids in reference}
    print(f"{pair.translator.config.variant}: {len(differ)}/{len(fast)} differ")
    assert len(fast) == SENTENCES and len(lengths) > 3, "the model must end sentences at varied lengths"
    assert differ == [], f"{len(differ)} of {len(fast)} sentences differ, first {differ[:5]}"
    # The output never leaves the target vocabulary (and is not one token over and over).
    emitted = {token for ids in fast for token in ids}
    assert emitted <= set(pair.fast.output.ids.tolist()) and len(emitted) > 10


@pytest.mark.parametrize(
    "rules",
    [
        {"early_stopping": True},
        {"early_stopping": "never", "length_penalty": 1.0},
        {"length_penalty": 0.6},
        {"length_penalty": -0.5},
    ],
)
def test_beam_search_follows_generate_config(lively_model_dir: Path, rules: dict[str, object]) -> None:
    pair = make_pair(lively_model_dir, "fp32")
    pair.ids = pair.ids[:60]
    for name, value in rules.items():
        setattr(pair.translator.model.generation_config, name, value)
        setattr(pair.reference.model.generation_config, name, value)
    pair.fast = FastDecoder(
        pair.translator.model, pair.fast.output, SearchRules.of(pair.translator.model.generation_config)
    )
    assert pair.decode_alone(pair.fast, 4) == pair.decode_alone(pair.reference, 4)


def test_generate_decoder_cuts_each_row_to_its_own_cap() -> None:
    rules = SearchRules(decoder_start=9, eos=0, forced_eos=True, length_penalty=1.0, early_stopping=False)
    decoder = GenerateDecoder(model=None, rules=rules)
    assert decoder._cut([5, 6, 7, 8], RowLimits(3)) == [5, 6, 0]
    assert decoder._cut([5, 0, 9, 9], RowLimits(8)) == [5, 0]
