"""What every benchmark shares: test sentences with reference lengths, the model, statistics, results.

Timings on the offline stand-in transfer to the real model only when decode lengths match, so a
stand-in run forces each output to the token length of its reference translation.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from archive.build import CONFIG_DIR, MODEL_NAME, ArchiveSpec, build_archive, model_digest
from archive.model_source import resolve_model_dir
from archive.tatoeba import REPO_ROOT, read_blocks
from bench.signature import git_commit, invoked_command, signature
from handlers.handler_config import HandlerConfig
from handlers.model.standin_marker import STANDIN_MARKER

RESULTS_DIR = REPO_ROOT / "bench" / "results"
# Where a run writes unless told otherwise: a folder of its own, named by its start and commit, so
# that no run writes over a result a doc cites (writable() refuses committed files anyway).
RUNS_DIR = RESULTS_DIR / "runs"
# Finished studies' frozen results, and where `make layout` (bench.studies.layout) writes its own.
STUDIES_RESULTS_DIR = REPO_ROOT / "bench" / "studies" / "results"
MODELS_DIR = REPO_ROOT / "build" / "models"
DEFAULT_MODEL = "Helsinki-NLP/opus-mt-zh-en"
# Every server benchmark runs cold: a sentence cache would answer the repeats in its inputs (Locust
# draws with replacement, warm-ups resend measured bodies) without the model.
CACHE_OFF: dict[str, Any] = {"sentence_cache_entries": 0}

SCHEDULERS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (handler keys, TorchServe keys) over config/zh_en_int8.yaml, cache off. Each states its
    # whole layout, so a name means the same whatever the yaml ships (step, since 903314a).
    # static: the layout `make layout` measured best and that shipped before: 2 workers x 1 thread,
    # TorchServe batches of up to 16.
    "static": (
        {"sentence_cache_entries": 0, "torchserve_batching": "static", "threads": 1},
        {"continuousBatching": False, "minWorkers": 2, "maxWorkers": 2, "batchSize": 16, "maxBatchDelay": 5},
    ),
    "step": (
        # One worker holds the host's work: two running batches in two processes, as the two
        # static workers (handlers.scheduling.partition_processes).
        {
            "sentence_cache_entries": 0,
            "torchserve_batching": "continuous",
            "threads": 1,
            "step_partitions": 2,
        },
        {"continuousBatching": True, "minWorkers": 1, "maxWorkers": 1, "batchSize": 64},
    ),
}


@dataclass(frozen=True)
class Sentence:
    source: str
    reference: str
    # Target-side tokens of the reference, eos included: the forced output length on a stand-in.
    reference_tokens: int


def load_model_dir(model: str = DEFAULT_MODEL, strict: bool = False) -> Path:
    """The same resolution as archive.build: hub id, local dir or `synthetic` (full-size stand-in)."""
    return resolve_model_dir(model, MODELS_DIR, "full", strict)


def is_standin(model_dir: Path) -> bool:
    return (model_dir / STANDIN_MARKER).exists()


def sample_sentences(tokenizer: Any, count: int | None = None, seed: int = 0) -> list[Sentence]:
    """`count` Tatoeba sentences in a seeded random order (all of them when None)."""
    blocks = read_blocks()
    if count is not None:
        blocks = random.Random(seed).sample(blocks, min(count, len(blocks)))
    lengths = [len(ids) for ids in tokenizer(text_target=[b.reference for b in blocks])["input_ids"]]
    return [Sentence(b.source, b.reference, n) for b, n in zip(blocks, lengths, strict=True)]


def unique_sentences(sentences: list[Sentence], count: int) -> list[Sentence]:
    """`count` distinct sources: the sentences once, then passes prefixed "2. ", "3. ", ..."""
    seen: set[str] = set()
    corpus: list[Sentence] = []
    passes = 0
    while len(corpus) < count:
        passes += 1
        for sentence in sentences:
            source = sentence.source if passes == 1 else f"{passes}. {sentence.source}"
            if source not in seen and len(corpus) < count:
                seen.add(source)
                corpus.append(Sentence(source, sentence.reference, sentence.reference_tokens))
    return corpus


def distinct_sentences(tokenizer: Any, count: int, seed: int = 0) -> list[Sentence]:
    """`count` distinct sources in a seeded random order, made unique past the test set's own
    (unique_sentences): a load draws each once, so no server's sentence cache answers a repeat."""
    tatoeba = sample_sentences(tokenizer)
    random.Random(seed).shuffle(tatoeba)
    return unique_sentences(tatoeba, count)


def archive_with(
    variant: str,
    model_dir: Path,
    workdir: Path,
    handler: Mapping[str, Any] = CACHE_OFF,
    top: Mapping[str, Any] | None = None,
) -> tuple[Path, str]:
    """`variant`'s archive packed into <workdir>/store with these handler keys set (default: cache off).

    `top` sets TorchServe's own keys (batchSize, continuousBatching, ...). The rest of
    config/zh_en_<variant>.yaml is kept; returns (model store, archive name). Packing takes a
    second or two (zip-store); the handler section is checked here, not in a worker.
    """
    config = {**yaml.safe_load((CONFIG_DIR / f"{MODEL_NAME}_{variant}.yaml").read_text()), **(top or {})}
    config["handler"] = {**(config.get("handler") or {}), **handler}
    HandlerConfig.from_mapping(config["handler"])
    config_dir, store = workdir / "config", workdir / "store"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / f"{MODEL_NAME}_{variant}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    spec = ArchiveSpec(variant, model_dir, store, config_dir)
    build_archive(spec, model_digest(model_dir))
    return store, spec.mar_path.name


def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 and mean in milliseconds."""
    ordered = sorted(seconds)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000

    return {
        "p50_ms": round(at(0.50), 2),
        "p95_ms": round(at(0.95), 2),
        "p99_ms": round(at(0.99), 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


def seconds_until(condition: Callable[[], bool], since: float, timeout: float = 300.0) -> float:
    """Seconds from `since` until `condition()` holds, polled every 0.1 s; TimeoutError past `timeout`."""
    while not condition():
        if time.monotonic() - since > timeout:
            raise TimeoutError(f"not recovered after {timeout:.0f}s")
        time.sleep(0.1)
    return round(time.monotonic() - since, 2)


def now(at: dt.datetime | None = None) -> str:
    """The date results and plots show: minutes, UTC (the signature keeps the ISO form)."""
    return (at or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")


def run_folder() -> Path:
    """bench/results/runs/<UTC date and minute>-<commit>[-N]/: this process's own folder (not created
    here), chosen once; a name an earlier run of the same minute holds gets the next free suffix."""
    global _THIS_RUN
    if _THIS_RUN is None:
        base = f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d-%H%M')}-{git_commit()}"
        names = (base, *(f"{base}-{n}" for n in range(2, 1000)))
        _THIS_RUN = next(RUNS_DIR / name for name in names if not (RUNS_DIR / name).exists())
    return _THIS_RUN


_THIS_RUN: Path | None = None


def newest_run() -> Path:
    """The latest run folder (by name: date, then commit); bench/results itself when none exists."""
    runs = sorted(RUNS_DIR.glob("*/")) if RUNS_DIR.exists() else []
    return runs[-1] if runs else RESULTS_DIR


def writable(path: Path) -> Path:
    """`path`, unless writing it would replace a result committed to git (which a doc may cite)."""
    if path.exists() and _committed(path):
        raise FileExistsError(
            f"{path} is a committed result and stays as it is: write this run to its own folder "
            "(the default, bench/results/runs/<date>-<commit>/) or name another --results-dir"
        )
    return path


def _committed(path: Path) -> bool:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "ls-files", "--error-unmatch", str(path.resolve())],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False  # no git: nothing is committed here
    return done.returncode == 0


def write_result(
    name: str, payload: dict[str, Any], results_dir: Path | None = None, command: str | None = None
) -> Path:
    """<results_dir>/<name>.json (default: a new run folder), signed with `command` (default: this
    process's command line); a rerun into the same folder replaces it, a committed file never is.
    The top-level date and machine predate the signature and stay: reports read them."""
    at = dt.datetime.now(dt.UTC)
    stamp = signature(command or invoked_command(), at)
    results_dir = run_folder() if results_dir is None else results_dir
    results_dir.mkdir(parents=True, exist_ok=True)
    path = writable(results_dir / f"{name}.json")
    result = {"date": now(at), "machine": stamp["machine"], "signature": stamp, **payload}
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
