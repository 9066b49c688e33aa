"""`make bench`: quality, the latency ladder, Locust load, the two admission policies (bench.mixed),
then the report. Finished studies (bench/studies/README.md) are not rerun here.

Locust runs against one server per configuration: int8 and fp32 as shipped (the step path), and
int8 with `decoder: generate` on static batches, so the decoders are compared under the same load
in the same run.
Each is packed from the model into a temporary store with the sentence cache off: every benchmark
runs cold.

    python -m bench.run_all            # the full-size model (minutes)
    python -m bench.run_all --quick    # smoke run: a few sentences, short loads
    python -m bench.run_all --loads int8:4:100 int8-generate:4:100   # only these Locust runs
    python -m bench.run_all --loads int8:4:100 libretranslate:4:100 libretranslate-tuned:4:100
        # ours beside LibreTranslate as shipped and tuned (bench.libretranslate_peer; beam 4 only)
    python -m bench.run_all --loads int8:4:100 image:4:100
        # make serve's archive beside the image we ship (make image MODEL=synthetic; bench.image_peer)
    python -m bench.run_all --quick --steps quality latency   # only these steps, then the report

Every step prints progress to stderr; results land in this run's own
folder, bench/results/runs/<date>-<commit>/ (or --results-dir); no run writes over a committed result.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from archive.build import MODEL_NAME
from bench import batch_throughput, bleu, image_peer, latency, libretranslate_peer, mixed, report
from bench.cli import BenchCli, Progress
from bench.common import CACHE_OFF, DEFAULT_MODEL, SCHEDULERS, archive_with
from bench.cpu_account import torchserve_roles
from bench.load import LoadSpec, load_label, run_load
from serving.torchserve import TorchServe


@dataclass(frozen=True)
class Plan:
    bleu_limit: int
    latency_args: list[str]
    # (server, num_beams, users) per Locust run; servers: int8, fp32, int8-generate
    loads: list[tuple[str, int, int]]
    duration: str
    mixed_args: list[str]


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
        ("int8-generate", 1, 100),
        ("int8-generate", 4, 100),
        # The served peer (issue 27): LibreTranslate as shipped and tuned, at its beam 4.
        ("libretranslate", 4, 100),
        ("libretranslate-tuned", 4, 100),
        # The image we ship (make image MODEL=synthetic), beside make serve's int8 above (issue 40).
        ("image", 4, 100),
    ],
    duration="30s",
    mixed_args=[],
)
QUICK = Plan(
    bleu_limit=16,
    latency_args=["--quick"],
    loads=[("int8", 1, 4), ("fp32", 1, 4), ("int8-generate", 1, 4)],
    duration="4s",
    mixed_args=[
        *("--users", "4", "--pace", "0.5", "--document-users", "1", "--document-sentences", "8"),
        *("--uniform-users", "4", "--duration", "4s", "--uniform-duration", "4s"),
        *("--beams", "1", "--stream-sentences", "12"),
    ],
)
SERVERS = ("int8", "fp32", "int8-generate")
# The steps before the report, which always runs last and renders whatever results the directory holds.
STEP_TITLES = {
    "quality": "quality (sacrebleu)",
    "latency": "latency ladder",
    "load": "load (Locust)",
    "mixed": "admission: at any step (shipped) against at batch boundaries (Locust, paced, streaming)",
    "batch": "batch prediction: the batch job in process and on Ray local",
}
STEP_NAMES = tuple(STEP_TITLES)
# Served peers, after ours in the same run: LibreTranslate as shipped and tuned, at its beam 4.
PEERS = tuple(libretranslate_peer.SETTINGS)
IMAGE = "image"  # the shipped image in podman (bench.image_peer), at any beam count
say = Progress("run_all")


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("run_all", __doc__, model=DEFAULT_MODEL, results_dir=True)
    cli.parser.add_argument("--quick", action="store_true")
    cli.parser.add_argument(
        "--loads", nargs="+", type=parse_load, metavar="SERVER:BEAMS:USERS", help="only these Locust runs"
    )
    cli.parser.add_argument(
        "--steps",
        nargs="+",
        choices=STEP_NAMES,
        default=list(STEP_NAMES),
        help="only these steps (all by default)",
    )
    args = cli.parse(argv)
    plan = QUICK if args.quick else FULL
    results = args.results_dir
    model_dir = cli.model_dir()
    started = time.monotonic()
    # Each step below parses its own command line and signs its results with it; the Locust runs
    # have none of their own, so they are signed with this one.
    if args.loads:
        run_loads(args.loads, plan.duration, model_dir, results, cli.command)
        return 0

    quick = ["--quick"] if plan is QUICK else []
    runs: dict[str, Callable[[], object]] = {
        "quality": lambda: run_quality(plan, model_dir, results),
        "latency": lambda: latency.main(
            ["--model", str(model_dir), *plan.latency_args, "--results-dir", str(results)]
        ),
        "load": lambda: run_loads(plan.loads, plan.duration, model_dir, results, cli.command),
        "mixed": lambda: mixed.main(
            ["--model", str(model_dir), *plan.mixed_args, "--results-dir", str(results)]
        ),
        "batch": lambda: run_batch(plan, model_dir, results, cli.command, quick),
    }
    steps = [name for name in STEP_NAMES if name in args.steps]
    for number, name in enumerate(steps, start=1):
        say(f"== step {number}/{len(steps) + 1}: {STEP_TITLES[name]}")
        runs[name]()
    say(f"== step {len(steps) + 1}/{len(steps) + 1}: report")
    report.main(["--results-dir", str(results)])
    say(f"bench finished in {time.monotonic() - started:.0f}s")
    return 0


def run_quality(plan: Plan, model_dir: Path, results: Path) -> None:
    """The published outputs' BLEU and chrF, then the test set through the batch job on the int8 archive."""
    bleu.main(["--published", "--results-dir", str(results)])
    with tempfile.TemporaryDirectory(prefix="zh_en_bleu_") as workdir:
        store, archive = archive_with("int8", model_dir, Path(workdir), {})
        bleu.main(
            [
                "--archive",
                str(store / archive),
                "--limit",
                str(plan.bleu_limit),
                "--results-dir",
                str(results),
            ]
        )


def run_batch(plan: Plan, model_dir: Path, results: Path, command: str, quick: list[str]) -> None:
    """The batch job, then the server's load that the report sets beside it (int8, the job's beams, 100
    users) once more: the job's ratio is taken against both, which bracket it on a host that drifts
    by several percent within minutes."""
    batch_throughput.main(["--model", str(model_dir), *quick, "--results-dir", str(results)])
    beside = [load for load in plan.loads if load == ("int8", batch_throughput.DEFAULT_BEAMS, 100)]
    if beside:
        run_loads(beside, plan.duration, model_dir, results, command, label_suffix=report.AFTER_BATCH)


def run_loads(
    loads: list[tuple[str, int, int]],
    duration: str,
    model_dir: Path,
    results: Path,
    command: str,
    label_suffix: str = "",
) -> None:
    """One cold server per configuration (SERVERS), each Locust run of `loads` against it, each result
    signed with `command` and labelled `load-<server>-<decoding>-u<users>` plus `label_suffix`."""
    for name in SERVERS:
        runs = [(beams, users) for server_name, beams, users in loads if server_name == name]
        if not runs:
            continue
        with tempfile.TemporaryDirectory(prefix="zh_en_bench_") as workdir:
            serve_store, archive = _server_archive(name, model_dir, Path(workdir))
            with TorchServe(serve_store, Path(workdir) / "server", models=[archive]) as server:
                for beams, users in runs:
                    spec = LoadSpec(
                        server.client.endpoints.inference,
                        users=users,
                        spawn_rate=users,
                        duration=duration,
                        num_beams=beams,
                        key_file=server.key_file,
                        label=load_label(name, beams, users, label_suffix),
                    )
                    run_load(
                        spec,
                        results,
                        model_dir,
                        command,
                        serving_pids=server.worker_pids,
                        cpu_roles=lambda: torchserve_roles(server),
                    )
    for name in PEERS:
        for server_name, _, users in loads:
            if server_name == name:
                setting = libretranslate_peer.SETTINGS[name]
                try:
                    libretranslate_peer.run_peer_load(setting, users, duration, model_dir, results, command)
                except libretranslate_peer.PeerUnavailable as error:  # our figures stand without it
                    say(f"LEFT OUT {name} (no result written): {error}")
    for server_name, beams, users in loads:
        if server_name == IMAGE:
            try:
                image_peer.run_image_load(beams, users, duration, model_dir, results, command)
            except image_peer.ImageUnavailable as error:  # our figures stand without it
                say(f"LEFT OUT the image (no result written): {error}")


def parse_load(text: str) -> tuple[str, int, int]:
    """SERVER:BEAMS:USERS, e.g. int8:4:100."""
    name, beams, users = text.split(":")
    if name not in (*SERVERS, *PEERS, IMAGE):
        raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join((*SERVERS, *PEERS, IMAGE))}")
    if name in PEERS and int(beams) != libretranslate_peer.BEAMS:
        raise argparse.ArgumentTypeError(f"{name} runs at its default beam {libretranslate_peer.BEAMS} only")
    return name, int(beams), int(users)


def _server_archive(name: str, model_dir: Path, workdir: Path) -> tuple[Path, str]:
    """The store and archive a load server runs: the variant as shipped with the sentence cache off
    (cold, like every benchmark); int8-generate is transformers' generate() as its users run it,
    on static batches (bench.common.SCHEDULERS["static"]), for comparison only."""
    variant, _, decoder = name.partition("-")
    handler, top = dict(CACHE_OFF), {}
    if decoder:
        handler, top = {**SCHEDULERS["static"][0], "decoder": decoder}, SCHEDULERS["static"][1]
    say(f"building {MODEL_NAME}_{variant}.mar with {handler} {top}")
    return archive_with(variant, model_dir, workdir, handler, top)


if __name__ == "__main__":
    raise SystemExit(main())
