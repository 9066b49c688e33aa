"""`make bench`: quality, the latency ladder, Locust load for fp32 and int8, then the report.

    python -m bench.run_all            # full-size archives in model_store/ (minutes)
    python -m bench.run_all --quick    # smoke run: a few sentences, short loads

Every step prints progress to stderr; results land in bench/results/ (or --results-dir).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import bleu, latency, report
from bench.common import RESULTS_DIR, load_model_dir
from bench.load import LoadSpec, run_load
from serving.server import TorchServe


@dataclass(frozen=True)
class Plan:
    bleu_limit: int
    latency_args: list[str]
    # (variant, num_beams, users) per Locust run, all against one server per variant
    loads: list[tuple[str, int, int]]
    duration: str


FULL = Plan(
    bleu_limit=200,
    latency_args=["--sentences", "32", "--beams", "1", "4", "--http"],
    loads=[
        ("int8", 1, 10),
        ("int8", 1, 50),
        ("int8", 1, 100),
        ("int8", 4, 100),
        ("fp32", 1, 100),
        ("fp32", 4, 100),
    ],
    duration="30s",
)
QUICK = Plan(bleu_limit=16, latency_args=["--quick"], loads=[("int8", 1, 4), ("fp32", 1, 4)], duration="4s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model", default="Helsinki-NLP/opus-mt-zh-en", help="as for archive.build")
    parser.add_argument("--model-store", type=Path, default=Path("model_store"))
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    results = args.results_dir
    model_dir = Path(args.model) if Path(args.model).is_dir() else load_model_dir(args.model)
    started = time.monotonic()

    _step(1, "quality (sacrebleu)")
    bleu.main(["--published", "--results-dir", str(results)])
    limit = str(plan.bleu_limit)
    bleu.main(
        ["--model-dir", str(model_dir), "--variant", "int8", "--limit", limit, "--results-dir", str(results)]
    )
    _step(2, "latency ladder")
    store = str(args.model_store)
    latency.main(
        ["--model", str(model_dir), "--model-store", store, *plan.latency_args, "--results-dir", str(results)]
    )
    _step(3, "load (Locust)")
    for variant in ("int8", "fp32"):
        runs = [(beams, users) for v, beams, users in plan.loads if v == variant]
        with (
            tempfile.TemporaryDirectory(prefix="zh_en_bench_") as workdir,
            TorchServe(args.model_store, Path(workdir), models=[f"zh_en_{variant}.mar"]) as server,
        ):
            for beams, users in runs:
                spec = LoadSpec(
                    server.client.endpoints.inference,
                    users=users,
                    spawn_rate=users,
                    duration=plan.duration,
                    num_beams=beams,
                    key_file=server.key_file,
                    label=f"load-{variant}-{'greedy' if beams == 1 else f'beam{beams}'}-u{users}",
                )
                run_load(spec, results, model_dir)
    _step(4, "report")
    report.main(["--results-dir", str(results)])
    print(f"bench finished in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


def _step(number: int, name: str) -> None:
    print(f"\n== [{number}/4] {name}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
