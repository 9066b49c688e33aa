"""Operations under load, measured: version swaps, a killed worker and (step) a killed partition.

    python -m tests.soak.faults [--model synthetic|hub id|dir] [--swap-seconds 60] [--concurrency 4]
                           [--scheduler step|static]

Starts a real TorchServe (production config, free local ports) serving zh_en_int8.mar, keeps a
steady stream of requests going, and
- swaps the default version int8 -> fp32 -> int8 ... with serving.swap until `--swap-seconds`
  have passed: failed requests, and the order in which variants answered;
- (--scheduler step) kills one step partition process of the worker with SIGKILL: failed
  requests (the worker replaces the partition and resubmits its sentences: 0 is the target), and
  seconds until the worker has all its partitions again;
- kills one worker process with SIGKILL: failed requests, seconds until /ping says Healthy
  and until the model has all its workers READY again.
--scheduler step (the default, as shipped) serves both versions with one continuous-batching
worker each (bench.common SCHEDULERS): a killed worker then takes every open request with it, and
nothing answers until its replacement is up; --scheduler static serves two workers per version.
Writes faults-step.json (faults.json under static) into the run's folder. The soak tests run the same
functions on the tiny stand-in, with either scheduler, and assert on them.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cli import BenchCli, Progress
from bench.common import DEFAULT_MODEL, SCHEDULERS, archive_with, seconds_until
from serving.client import MODEL_NAME, TorchServeClient
from serving.processes import live_children
from serving.swap import resolve_target, swap
from serving.torchserve import TorchServe
from tests.soak.steady_load import SteadyLoad

VERSIONS = ("1.0-fp32", "1.0-int8")
say = Progress("faults")


def swap_under_load(
    server: TorchServe, load: SteadyLoad, seconds: float, workers: int | None = None
) -> dict[str, Any]:
    """Alternate fp32/int8 as the default while `load` runs, until `seconds` passed; ends where it began.

    `workers` per version: as each archive's model config starts it, unless given."""
    started = time.monotonic()
    swaps: list[dict[str, Any]] = []
    while time.monotonic() - started < seconds or len(swaps) < 2 or len(swaps) % 2:
        target = VERSIONS[len(swaps) % 2]
        began = time.monotonic()
        swap(server.client, resolve_target(target, server.model_store), workers, say=say)
        swaps.append({"to": target, "seconds": round(time.monotonic() - began, 1)})
        time.sleep(2.0)  # let the new default answer for a while before the next swap
    return {"swaps": swaps, "seconds": round(time.monotonic() - started, 1)}


def kill_worker_under_load(
    server: TorchServe, workers: int | None = None, timeout: float = 300.0
) -> dict[str, Any]:
    """SIGKILL one worker; time until /ping is Healthy again and until all workers are READY
    (`workers`: the default version's minWorkers as TorchServe reports them, unless given)."""
    version = server.client.default_version()
    if workers is None:
        workers = int(server.client.describe(version=version)[0]["minWorkers"])
    victim = server.worker_pids()[0]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.5)  # the frontend notices a dead worker within milliseconds; don't race it
    healthy = seconds_until(lambda: _healthy(server.client), killed, timeout)
    ready = seconds_until(lambda: server.client.ready_workers(version) >= workers, killed, timeout)
    return {"killed_pid": victim, "healthy_after_s": healthy, "all_ready_after_s": ready}


def kill_partition_under_load(server: TorchServe, partitions: int, timeout: float = 120.0) -> dict[str, Any]:
    """SIGKILL one step partition of the (one) worker; time until the worker has `partitions` again.

    The worker forks the replacement: it is back when the victim is no longer among the worker's
    live children and a new one is.
    """
    (worker,) = server.worker_pids()
    victim = live_children(worker)[0]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)

    def back() -> bool:
        children = live_children(worker)
        return victim not in children and len(children) == partitions

    after = seconds_until(back, killed, timeout)
    return {
        "worker_pid": worker,
        "killed_pid": victim,
        "partition_back_after_s": after,
        "worker_survived": server.worker_pids() == [worker],
    }


def summarize(load: SteadyLoad) -> dict[str, Any]:
    failures = load.failures()
    return {
        "requests": len(load.outcomes),
        "failed": len(failures),
        "resent_unanswered": load.resent(),
        "failure_samples": sorted({f"{f.status} {f.error}"[:160] for f in failures})[:5],
        "variants": dict(load.variants()),
        "variant_sequence": load.variant_sequence(),
    }


def _healthy(client: TorchServeClient) -> bool:
    response = client.ping()
    return response.status_code == 200 and response.json().get("status") == "Healthy"


def cold_store(model_dir: Path, workdir: Path, scheduler: str = "static") -> Path:
    """Both archives packed with the sentence cache off: the few texts repeat, and a cache would
    answer them without the model, so swaps and kills would meet idle workers."""
    handler, top = SCHEDULERS[scheduler]
    for variant in ("fp32", "int8"):
        store, _ = archive_with(variant, model_dir, workdir, handler, top)
    return store


def partitions_of(scheduler: str) -> int:
    """Step partitions per worker (0 for a static worker: it decodes in its own thread)."""
    handler = SCHEDULERS[scheduler][0]
    return (
        int(handler.get("step_partitions", 1))
        if handler.get("torchserve_batching", "continuous") == "continuous"
        else 0
    )


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("tests.soak.faults", __doc__, model=DEFAULT_MODEL)
    cli.parser.add_argument("--swap-seconds", type=float, default=60.0)
    cli.parser.add_argument("--concurrency", type=int, default=4)
    cli.parser.add_argument("--num-beams", type=int, default=1)
    cli.parser.add_argument("--max-new-tokens", type=int, default=16)
    cli.parser.add_argument("--scheduler", default="step", choices=list(SCHEDULERS))  # step ships
    args = cli.parse(argv)
    texts = ["汤姆不会同意的。", "我要看病。", "那个穿棕色大衣的女人是谁？", "如果今天是星期日，我會去釣魚。"]
    options = {"num_beams": args.num_beams, "max_new_tokens": args.max_new_tokens}
    result: dict[str, Any] = {
        "scheduler": args.scheduler,
        "concurrency": args.concurrency,
        "options": options,
    }
    model_dir = cli.model_dir()
    with (
        tempfile.TemporaryDirectory(prefix="zh_en_faults_") as workdir,
        TorchServe(cold_store(model_dir, Path(workdir), args.scheduler), Path(workdir) / "server") as server,
    ):
        endpoints = server.client.endpoints
        say(f"swapping versions for {args.swap_seconds:.0f}s under load ...")
        with SteadyLoad(endpoints, server.key_file, texts, args.concurrency, options=options) as load:
            result["swap"] = swap_under_load(server, load, args.swap_seconds)
        result["swap"].update(summarize(load))
        if partitions_of(args.scheduler):
            say("killing one step partition under load ...")
            with SteadyLoad(endpoints, server.key_file, texts, args.concurrency, options=options) as load:
                time.sleep(3.0)
                result["partition_kill"] = kill_partition_under_load(server, partitions_of(args.scheduler))
                time.sleep(3.0)
            result["partition_kill"].update(summarize(load))
        say("killing one worker under load ...")
        with SteadyLoad(endpoints, server.key_file, texts, args.concurrency, options=options) as load:
            time.sleep(3.0)
            result["kill"] = kill_worker_under_load(server)
            time.sleep(3.0)
        result["kill"].update(summarize(load))
        answer = server.client.translate(texts[0]).json()
        result["model"] = {key: answer.get(key) for key in ("model", "version", "variant", "standin")}
    name = "faults" if args.scheduler == "static" else f"faults-{args.scheduler}"
    path = cli.write(name, {"model_name": MODEL_NAME, **result})
    swap_part, kill_part = result["swap"], result["kill"]
    if "partition_kill" in result:
        partition = result["partition_kill"]
        print(
            f"killed partition: {partition['failed']}/{partition['requests']} failed, back after "
            f"{partition['partition_back_after_s']}s, worker survived: {partition['worker_survived']}"
        )
    print(
        f"swaps: {len(swap_part['swaps'])} in {swap_part['seconds']}s, "
        f"{swap_part['failed']}/{swap_part['requests']} requests failed; "
        f"killed worker: {kill_part['failed']}/{kill_part['requests']} failed, /ping Healthy after "
        f"{kill_part['healthy_after_s']}s, all workers READY after {kill_part['all_ready_after_s']}s\n"
        f"written to {path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
