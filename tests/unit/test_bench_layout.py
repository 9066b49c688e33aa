"""bench.studies.layout (`make layout`) without a server: which points the grid keeps, the yaml each
point gets, the winner."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml

from archive.build import CONFIG_DIR
from bench.common import RUNS_DIR
from bench.studies import layout, layout_report
from bench.studies.layout import FULL, QUICK, Point, grid, layout_config, read_base_config, winner
from handlers.handler_config import ConfigError, HandlerConfig


def test_default_grid_on_two_cores() -> None:
    points, skipped = grid(FULL, cores=2)
    assert {(p.partitions, p.threads) for p in points} == {(2, 1), (1, 2)}  # every split of the cores
    assert sorted(p.max_batch_rows for p in points if p.partitions == 2) == [32, 64, 128]
    assert len(points) == 6 and not skipped


def test_default_layouts_split_the_cores() -> None:
    pairs, _ = layout.layouts(FULL, cores=4, oversubscribe=False)
    assert pairs == [(1, 4), (2, 2), (4, 1)]


def test_given_axes_are_crossed_within_the_cores() -> None:
    plan = replace(FULL, partitions=(1, 2), threads=(1, 2))
    points, skipped = grid(plan, cores=2)
    assert {(p.partitions, p.threads) for p in points} == {(1, 1), (1, 2), (2, 1)}
    assert "2 partitions x 2 threads: more than the 2 cores" in skipped
    points, _ = grid(plan, cores=2, oversubscribe=True)
    assert (2, 2) in {(p.partitions, p.threads) for p in points}


def test_quick_plan_is_two_points() -> None:
    points, skipped = grid(QUICK, cores=2)
    assert len(points) == 2 and not skipped


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_point_config_keeps_the_variant_and_sets_the_layout(variant: str) -> None:
    base = read_base_config(CONFIG_DIR, variant)
    config = layout_config(base, Point(2, 1, 32), "generate")
    parsed = yaml.safe_load(yaml.safe_dump(config))
    # What TorchServe reads is the shipped policy's: one worker, continuous batching.
    assert {key: parsed[key] for key in base if key != "handler"} == {
        k: v for k, v in base.items() if k != "handler"
    }
    handler = HandlerConfig.from_mapping(parsed["handler"])
    assert (handler.variant, handler.step_partitions, handler.threads, handler.max_batch_rows) == (
        variant,
        2,
        1,
        32,
    )
    assert (handler.decoder, handler.torchserve_batching) == ("generate", "continuous")


def test_point_config_is_checked_before_any_server_starts() -> None:
    base = read_base_config(CONFIG_DIR, "int8")
    with pytest.raises(ConfigError, match="max_batch_rows"):
        layout_config(base, Point(1, 1, 0))


def test_plan_overrides_from_the_command_line() -> None:
    args = layout.parse_args(["--quick", "--partitions", "2", "--duration", "7s"])
    plan = layout.plan_of(args)
    assert (plan.partitions, plan.threads, plan.duration, plan.users, plan.name) == (
        (2,),
        QUICK.threads,
        "7s",
        QUICK.users,
        "layout-quick",
    )
    assert layout.parse_args(["--num-beams", "default", "1"]).num_beams == [None, 1]
    # A run folder of its own: never the frozen study the docs cite.
    assert layout.parse_args([]).results_dir.parent == RUNS_DIR


def _row(point: Point, rps: float, failures: int = 0, p95: float = 100.0) -> dict[str, Any]:
    load = {
        "rps": rps,
        "failures": failures,
        "requests": 10,
        "p50_ms": 50.0,
        "p95_ms": p95,
        "decode": "default",
    }
    return {"point": point.__dict__, "loads": [load], "memory_after_runs": {}}


def test_winner_is_the_fastest_point_without_failures() -> None:
    fast_but_failing = _row(Point(2, 1, 64), 30.0, failures=3)
    best = _row(Point(2, 1, 32), 20.0, p95=900.0)
    tied_but_slower_tail = _row(Point(1, 2, 32), 20.0, p95=1500.0)
    broken = {"point": Point(1, 1, 16).__dict__, "error": "TimeoutError: not healthy"}
    assert winner([fast_but_failing, tied_but_slower_tail, best, broken]) is best
    assert winner([broken]) is None


def test_table_and_snippet_name_the_winner() -> None:
    rows = [_row(Point(1, 1, 16), 10.0), _row(Point(2, 1, 32), 20.0)]
    result = {
        "decodes": [None],
        "points": rows,
        "winner": winner(rows),
        "variant": "int8",
        "users": 100,
        "date": "2026-11-22 12:00 UTC",
        "machine": {"cpu": "Test CPU", "cores": 2},
        "standin": True,
    }
    table = layout_report.markdown_table(result).splitlines()
    assert table[2].startswith("| **1** | 2 | 1 | 32 | 20.0 |") and table[3].startswith("| 2 | 1 | 1 | 16 |")
    snippet = layout_report.winning_config(result)
    assert "Test CPU" in snippet and "2026-11-22" in snippet
    assert yaml.safe_load(snippet) == {"handler": {"step_partitions": 2, "threads": 1, "max_batch_rows": 32}}
