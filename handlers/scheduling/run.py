"""The served loop run to its end in this thread: how whatever is not a request decodes.

The worker's warm-up, the latency ladder, BLEU, the exactness and invariance tests and the
profiles submit their sentences to a StepScheduler built as the handler builds each partition's
(`scheduler_for`) and step it in this thread (InlineDriver, as a static worker does) until every
sentence is done: admission, steps and results are the server's, and there is no second driver
to measure instead. Each sentence is a one-sentence request, submitted in the order given; the
scheduler admits them in that order as rows free up (a batch of 16 at beam 4 fills the shipped
64-row budget in one cohort, as a static batch of 16 would).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Hashable, Sequence
from pathlib import Path

from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.search import RowLimits
from handlers.model.translator import Translator
from handlers.scheduling.inline import InlineDriver
from handlers.scheduling.policy import DecodePolicy
from handlers.scheduling.step_scheduler import StepScheduler, Submission

# The shipped rules (HandlerConfig's defaults are config/zh_en_*.yaml's): the scheduler's rows and
# the decode policy for callers that bring no deployment config of their own (benchmarks, tests).
SHIPPED = HandlerConfig()


def load_and_warm_up(model_dir: Path, config: HandlerConfig, threads: int | None = None) -> Translator:
    """Translator.load (with `threads`), then (config.warmup) one short sentence through the served
    loop so that the first request finds every code path warm; load_seconds counts both."""
    started = time.perf_counter()
    translator = Translator.load(model_dir, config.model, threads)
    if config.warmup:
        translate(translator, ["你好。"], GenerationOptions(max_new_tokens=4), config)
        seconds = round(time.perf_counter() - started, 2)
        translator.info = dataclasses.replace(translator.info, load_seconds=seconds)
    return translator


def scheduler_for(translator: Translator, config: HandlerConfig) -> StepScheduler:
    """One running batch over the translator's decoder, with the config's row budget and fairness."""
    return StepScheduler(
        translator.decoder,
        translator.tokenizer.pad_token_id,
        config.max_batch_rows,
        config.max_cohorts,
        config.document_rows_beside_interactive,
        config.interactive_window_ms / 1000,
    )


def decode_ids(
    translator: Translator,
    ids: Sequence[Sequence[int]],
    limits: Sequence[RowLimits],
    beams: int | Sequence[int],
    keep: int | Sequence[int] = 1,
    config: HandlerConfig = SHIPPED,
) -> list[list[list[int]]]:
    """Each sentence's finished hypotheses (generated ids, eos kept), best first, up to its `keep`."""
    count = len(ids)
    beam_counts = [beams] * count if isinstance(beams, int) else list(beams)
    keeps = [keep] * count if isinstance(keep, int) else list(keep)
    driver = InlineDriver(scheduler_for(translator, config))
    for index, (row, limit, row_beams, row_keep) in enumerate(
        zip(ids, limits, beam_counts, keeps, strict=True)
    ):
        driver.submit(Submission.of(index, [row], [limit], row_beams, keep=row_keep))
    found: dict[Hashable, list[list[int]]] = {
        key.request: ranked for key, ranked in driver.run(_never, math.inf)
    }
    missing = [index for index in range(count) if index not in found]
    assert not missing, f"the scheduler left sentences {missing[:5]} undecoded"
    return [found[index] for index in range(count)]


def _never(finished: object) -> bool:
    return False


def translate_ids(
    translator: Translator,
    ids: Sequence[Sequence[int]],
    options: Sequence[GenerationOptions],
    config: HandlerConfig = SHIPPED,
) -> list[list[str]]:
    """Per text: its translation, then up to options.alternatives next-best ones that read differently."""
    policy = DecodePolicy.of(config, translator)
    limits = [policy.row_limits(option, len(row)) for option, row in zip(options, ids, strict=True)]
    beams = [policy.beams_for(option) for option in options]
    keep = [1 + option.alternatives for option in options]
    decoded = decode_ids(translator, ids, limits, beams, keep, config)
    return [translator.ranked_texts(ranked) for ranked in decoded]


def translate(
    translator: Translator, texts: Sequence[str], options: GenerationOptions, config: HandlerConfig = SHIPPED
) -> list[str]:
    """Each text's translation, every text with the same options (a text over the token limit raises)."""
    ids = translator.encode(texts)
    return [ranked[0] for ranked in translate_ids(translator, ids, [options] * len(texts), config)]
