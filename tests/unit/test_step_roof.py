"""bench.step_roof: the multiply-adds a step and a token cost, the clock around the served loop, and
the roof arithmetic, on the tiny stand-in."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.step_roof import StepClock, Work, against_roof, clocked
from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.model.translator import Translator
from handlers.scheduling.run import translate_ids
from handlers.scheduling.step_scheduler import StepScheduler

# opus-mt-zh-en's shape (and the full-size stand-in's).
OPUS_MT = SimpleNamespace(
    d_model=512, decoder_ffn_dim=2048, encoder_ffn_dim=2048, decoder_layers=6, encoder_layers=6
)


def test_work_of_opus_mt_is_issue_40s_38_4m_multiply_adds_a_row() -> None:
    work = Work.of(OPUS_MT, 32_000)
    # 6 x (4 + 2) x 512^2 + 6 x 2 x 512 x 2,048 + 512 x 32,000 (issue 40: "38.4M ... per row").
    assert work.row_step == 38_404_096
    # 6 x (4 x 512^2 + 2 x 512 x 2,048) + 6 decoder layers' cross keys and values (2 x 512^2).
    assert work.token == 18_874_368 + 3_145_728


def test_against_roof_sets_each_part_against_its_own_work() -> None:
    clock = StepClock(steps=10, row_steps=160, tokens=100, step_seconds=0.06, encode_seconds=0.01)
    work = Work(row_step=1_000_000, token=2_000_000)
    result = against_roof(clock, 0.08, work, "avx512_vnni", 2.0)  # 128 G multiply-adds a second
    parts = result["parts"]
    step_roof = 160 * 1_000_000 / 128e9
    assert parts["decoder step"]["over_roof"] == pytest.approx(0.06 / step_roof)
    assert parts["decoder step"]["ms_per_step"] == pytest.approx(6.0)
    assert parts["encoder"]["over_roof"] == pytest.approx(0.01 / (100 * 2_000_000 / 128e9))
    whole = parts["whole run over its steps, all its work"]
    assert whole["roof_ms_per_step"] == pytest.approx(1000 * (160e6 + 200e6) / 128e9 / 10)
    assert parts["whole run over its steps, decoder roof (as until 2026-12-07)"]["over_roof"] == (
        pytest.approx(0.08 / step_roof)
    )


def test_a_path_without_a_defined_roof_reports_times_only() -> None:
    result = against_roof(StepClock(steps=2, row_steps=2, step_seconds=0.01), 0.02, Work(1, 1), "avx2", 3.0)
    assert all(part["over_roof"] is None for part in result["parts"].values())
    assert result["parts"]["decoder step"]["ms_per_step"] == pytest.approx(5.0)


def test_clocked_counts_the_served_loops_steps_rows_and_tokens(tiny_model_dir: Path) -> None:
    translator = Translator.load(tiny_model_dir, HandlerConfig(variant="int8", warmup=False).model)
    ids = translator.encode(["汤姆不会同意的", "是那家。"])
    options = [GenerationOptions(num_beams=2, max_new_tokens=5, min_new_tokens=5)] * 2
    step = StepScheduler.step
    with clocked(translator.decoder) as clock:
        translate_ids(translator, ids, options)
    assert StepScheduler.step is step and "start" not in vars(translator.decoder)
    assert "step" not in vars(translator.decoder)
    assert clock.tokens == sum(len(row) for row in ids)
    # Five steps, each new token forced: a sentence's first step runs one row, its beams branch after.
    assert clock.steps == 5 and clock.row_steps == 2 + 4 * 2 * 2
    assert clock.step_seconds > 0 and clock.encode_seconds > 0
