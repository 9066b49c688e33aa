"""bench.batch_throughput's ratios, on the runs of a cited result and on a smoke run's."""

from __future__ import annotations

import json

from bench.batch_throughput import ratios_of
from bench.common import RESULTS_DIR

CITED = RESULTS_DIR / "runs" / "2026-11-28-2152-6cd5bc0" / "batch_throughput.json"


def test_ray_against_local_over_the_whole_run_and_at_steady_state() -> None:
    result = json.loads(CITED.read_text())
    ratios = ratios_of(result["runs"])
    assert {key: ratios[key] for key in result["ratios"]} == result["ratios"]  # as that run wrote them
    # One model load off each: 18.41 against 19.42 sentences/s.
    assert ratios["ray_one_actor_vs_in_process_after_load"] == 0.948


def test_a_smoke_run_too_short_for_a_load_has_no_steady_state_ratio() -> None:
    rates = {"in_process": 4.0, "ray_one_actor": 3.0, "local_per_core": 8.0, "ray_per_core": 6.0}
    runs = {name: {"sentences_per_s": r, "sentences_per_s_after_load": None} for name, r in rates.items()}
    assert ratios_of(runs) == {"ray_one_actor_vs_in_process": 0.75, "ray_per_core_vs_local_per_core": 0.75}


def test_steady_state_takes_each_engines_start_up_off_where_both_runs_measured_one() -> None:
    rates = {"in_process": 4.0, "ray_one_actor": 3.0, "local_per_core": 8.0, "ray_per_core": 6.0}
    runs = {
        name: {
            "sentences_per_s": r,
            "sentences_per_s_after_load": None,
            "sentences_per_s_after_start_up": r + 1,
        }
        for name, r in rates.items()
    }
    assert ratios_of(runs)["ray_one_actor_vs_in_process_after_start_up"] == 0.8  # 4 / 5
    runs["ray_one_actor"]["sentences_per_s_after_start_up"] = None  # a run too short to take it off
    assert "ray_one_actor_vs_in_process_after_start_up" not in ratios_of(runs)
