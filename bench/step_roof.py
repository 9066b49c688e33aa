"""A decode step against the roof of issue 40: the int8 multiply-adds it must do at one 512-bit
`vpdpbusd` (64 multiply-adds) a cycle.

Until 2026-12-07 the docs took a step's time as a run's time over its steps, encoder included, and
set it against a roof of the decoder's multiply-adds only (bench/results/roof-2026-11-29). `clocked`
times what that leaves mixed: the scheduler's steps (every cohort's decoder step and its search) and
the encoder (the decoder's `start`), in CPU time, with the rows and tokens each handled. `against_roof`
sets each against its own work, and the whole run against all of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from handlers.scheduling.step_scheduler import StepScheduler

# int8 multiply-adds a cycle on a path's widest instruction, where issue 40 defines a roof.
MULTIPLY_ADDS_PER_CYCLE = {"avx512_vnni": 64}


@dataclass
class StepClock:
    """CPU seconds in decoder steps and in encoding over one run, and the work each did."""

    steps: int = 0
    row_steps: int = 0
    tokens: int = 0
    step_seconds: float = 0.0
    encode_seconds: float = 0.0


@contextmanager
def clocked(decoder: Any) -> Iterator[StepClock]:
    """Time every StepScheduler.step and `decoder.start` inside the block (this process only); count
    the rows each `decoder.step` is given (a beam cohort may run fewer than sentences x beams)."""
    clock = StepClock()
    step, start, decoder_step = StepScheduler.step, decoder.start, decoder.step

    def counted_step(cohorts: Any) -> Any:
        clock.row_steps += sum(int(cohort.tokens.shape[0]) for cohort in cohorts)
        return decoder_step(cohorts)

    def timed_step(scheduler: StepScheduler) -> Any:
        clock.steps += 1
        began = time.process_time()
        try:
            return step(scheduler)
        finally:
            clock.step_seconds += time.process_time() - began

    def timed_start(owners: Any, input_ids: Any, attention_mask: Any, *rest: Any) -> Any:
        clock.tokens += int(attention_mask.sum())
        began = time.process_time()
        try:
            return start(owners, input_ids, attention_mask, *rest)
        finally:
            clock.encode_seconds += time.process_time() - began

    StepScheduler.step = timed_step  # type: ignore[method-assign,assignment]
    decoder.start, decoder.step = timed_start, counted_step
    try:
        yield clock
    finally:
        StepScheduler.step = step  # type: ignore[method-assign]
        del decoder.start, decoder.step  # the class's methods again


@dataclass(frozen=True)
class Work:
    """int8 multiply-adds of one decoder row-step and of one encoder token."""

    row_step: int
    token: int

    @classmethod
    def of(cls, config: Any, output_columns: int) -> Work:
        """From a Marian config: a decoder layer's self-attention q, k, v, o and cross-attention q, o
        (d x d each; cross keys and values are made at encoding), fc1 and fc2, then the output layer;
        an encoder layer's q, k, v, o, fc1 and fc2, and every decoder layer's cross keys and values."""
        d = config.d_model
        decoder_layer = 6 * d * d + 2 * d * config.decoder_ffn_dim
        encoder_layer = 4 * d * d + 2 * d * config.encoder_ffn_dim
        return cls(
            row_step=config.decoder_layers * decoder_layer + d * output_columns,
            token=config.encoder_layers * encoder_layer + config.decoder_layers * 2 * d * d,
        )


def against_roof(clock: StepClock, run_seconds: float, work: Work, path: str, ghz: float) -> dict[str, Any]:
    """Each part's time per step beside its roof on `path` at `ghz` (no roof: ratios left out)."""
    per_cycle = MULTIPLY_ADDS_PER_CYCLE.get(path)
    rate = per_cycle * ghz * 1e9 if per_cycle and ghz else None
    step_work = clock.row_steps * work.row_step
    encode_work = clock.tokens * work.token

    def roof(multiply_adds: int) -> float | None:
        return None if rate is None else multiply_adds / rate

    parts = {
        "decoder step": (clock.step_seconds, roof(step_work)),
        "encoder": (clock.encode_seconds, roof(encode_work)),
        "whole run over its steps, decoder roof (as until 2026-12-07)": (run_seconds, roof(step_work)),
        "whole run over its steps, all its work": (run_seconds, roof(step_work + encode_work)),
    }
    steps = max(clock.steps, 1)
    return {
        **asdict(clock),
        "run_seconds": run_seconds,
        "path": path,
        "ghz": ghz,
        "multiply_adds_per_cycle": per_cycle,
        "work": asdict(work),
        "parts": {
            name: {
                "ms_per_step": 1000 * seconds / steps,
                "roof_ms_per_step": None if floor is None else 1000 * floor / steps,
                "over_roof": None if not floor else seconds / floor,
            }
            for name, (seconds, floor) in parts.items()
        },
    }
