"""bench.cache_load's streams and hit-rate bookkeeping, and the old benchmarks' cold servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import yaml

from archive.build import CONFIG_DIR
from bench import cache_load, faults, run_all
from bench.common import Sentence, archive_with
from bench.layout import Point, layout_config, read_base_config

METRICS = """# HELP SentenceCacheHits Torchserve prometheus counter metric with unit: count
# TYPE SentenceCacheHits counter
SentenceCacheHits{Variant="int8",ModelName="zh_en",Level="Model",Hostname="h",} 7.0
SentenceCacheHits{Variant="int8",ModelName="zh_en",Level="Model",Hostname="g",} 3.0
SentenceCacheMisses{Variant="int8",ModelName="zh_en",Level="Model",Hostname="h",} 30.0
SentencesTranslated{Variant="int8",ModelName="zh_en",Level="Model",Hostname="h",} 40.0
ts_inference_requests_total{model_name="zh_en",model_version="default",hostname="h",} 40.0
"""


def test_cold_stream_never_repeats_and_zipf_repeats_its_head() -> None:
    cold = cache_load.cold_order(500, seed=1)
    assert sorted(cold) == list(range(500)) and cache_load.repeats(cold) == 0.0
    zipf = cache_load.zipf_order(500, 1.1, seed=1, length=2000)
    assert zipf == cache_load.zipf_order(500, 1.1, seed=1, length=2000)
    assert all(0 <= i < 500 for i in zipf)
    counts = Counter(zipf).most_common()
    assert counts[0][1] > 10 * counts[len(counts) // 2][1]  # a heavy head, a long tail
    assert 0.5 < cache_load.repeats(zipf) < 1.0
    assert cache_load.repeats([1, 2, 1, 1]) == 0.5


def test_sentences_are_deduplicated_and_bodies_forced_on_the_standin() -> None:
    sentences = [
        Sentence("你好。", "Hi.", 3),
        Sentence("谢谢。", "Thanks.", 4),
        Sentence("你好。", "Hello.", 5),
    ]
    unique = cache_load.unique_sentences(sentences)
    assert [s.reference for s in unique] == ["Hi.", "Thanks."]
    assert cache_load.bodies(unique, None, standin=True)[1] == {
        "text": "谢谢。",
        "min_new_tokens": 4,
        "max_new_tokens": 4,
    }
    assert cache_load.bodies(unique, 1, standin=False)[0] == {"text": "你好。", "num_beams": 1}


def test_cache_counters_sum_workers_from_prometheus_text() -> None:
    assert cache_load.cache_counters(METRICS) == {"hits": 10.0, "misses": 30.0}
    assert cache_load.cache_counters("") == {"hits": 0.0, "misses": 0.0}
    assert cache_load.hit_rate(10, 40) == 0.25 and cache_load.hit_rate(0, 0) is None


def test_markdown_names_the_runs_and_their_hit_rates() -> None:
    run = {
        "requests": 10,
        "failures": 0,
        "rps": 5.0,
        "p50_ms": 100.0,
        "p95_ms": 200.0,
        "response_hit_rate": 0.5,
        "metrics": {"hit_rate": 0.5},
        "stream_repeats": 0.6,
    }
    result = {
        "date": "today",
        "machine": {"cpu": "AMD EPYC", "cores": 2},
        "command": cache_load.COMMAND,
        "workers": 2,
        "cache": {"sentence_cache_entries": 20000},
        "users": 4,
        "duration": "5s",
        "num_beams": None,
        "output_lengths": "natural",
        "sentences": 100,
        "zipf_s": 1.1,
        "seed": 0,
        "runs": {"cold": {**run, "response_hit_rate": 0.0}, "zipf": run},
        "rps_ratio": 1.0,
    }
    page = cache_load.markdown(result)
    assert "| cold | 10 | 0 | 5.0 | 100 | 200 | 0.0% |" in page and "| zipf |" in page and "60.0%" in page


def test_the_stream_user_exists_only_for_the_cache_scenario(tmp_path: Path) -> None:
    """bench.load runs every user class of the locustfile: the stream user must stay out of them."""
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps({"bodies": [{"text": "你好。"}], "order": [0]}))
    probe = "import runpy; print('StreamTranslator' in runpy.run_path('bench/locustfile.py'))"
    seen = []
    for extra in ({}, {"ZH_EN_STREAM": str(stream)}):
        env = {**os.environ, "ZH_EN_SENTENCES": str(stream), **extra}
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        seen.append(out.stdout.strip().splitlines()[-1])
    assert seen == ["False", "True"]


def test_old_benchmarks_serve_with_the_cache_off(tiny_model_dir: Path, tmp_path: Path) -> None:
    def handler_of(store: Path, archive: str) -> dict[str, object]:
        with zipfile.ZipFile(store / archive) as mar:
            name = next(n for n in mar.namelist() if n.endswith(".yaml"))
            config: dict[str, object] = yaml.safe_load(mar.read(name))["handler"]
        return config

    assert read_base_config(CONFIG_DIR, "int8")["handler"]["sentence_cache_entries"] > 0  # production: on
    assert (
        layout_config(read_base_config(CONFIG_DIR, "int8"), Point(2, 1, 16, 32))["handler"][
            "sentence_cache_entries"
        ]
        == 0
    )
    store, archive = archive_with("int8", tiny_model_dir, tmp_path / "latency")
    assert handler_of(store, archive)["sentence_cache_entries"] == 0
    for name in run_all.SERVERS:
        store, archive = run_all._server_archive(name, tiny_model_dir, tmp_path / name)
        handler = handler_of(store, archive)
        assert handler["sentence_cache_entries"] == 0
        assert handler["decoder"] == ("generate" if name == "int8-generate" else "fast")
    store = faults.cold_store(tiny_model_dir, tmp_path / "faults")
    assert [handler_of(store, f"zh_en_{v}.mar")["sentence_cache_entries"] for v in ("fp32", "int8")] == [0, 0]
