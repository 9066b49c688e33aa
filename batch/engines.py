"""Where shards are translated: by processes on this host, or by a pool of Ray actors (Ray Data).

Every engine runs the same `UnitTranslator` on the same shards; it only decides where. Workers are
one per core by default, each loading the archive once and translating one shard per call with
the archive's intra-op threads (1 as shipped: `make layout`'s one worker per core, one thread
each). A free worker takes the next shard, so no core idles while shards remain.
- LocalEngine: processes of this host (with one, this process itself), started with spawn (GNU
  OpenMP's pool does not survive fork); nothing else runs on the cores beside them.
- RayEngine: Ray Data streams the shards through `map_batches` over an actor pool, on this host or
  a cluster.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import json
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from batch import ray_reaper
from batch.shards import Shard, results_from_json, results_to_json
from batch.units import JobOptions, UnitResult

ShardDone = Callable[[Shard, list[UnitResult]], None]
REPO_ROOT = Path(__file__).resolve().parent.parent
# Shards travel as small JSON strings: a small object store leaves the host's memory to the models.
OBJECT_STORE_BYTES = 96 * 1024 * 1024
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Engine(Protocol):
    def run(self, shards: Sequence[Shard], done: ShardDone) -> None: ...


def host_cpus() -> int:
    return len(os.sched_getaffinity(0))


def workers_for(threads: int, cpus: int | None = None) -> int:
    """One worker per `threads` cores: the layout `make layout` found best for the server."""
    return max(1, (cpus or host_cpus()) // max(1, threads))


class LocalEngine:
    """Shards on this host: in this process (one worker), or in a pool of worker processes, each
    with the archive loaded once; results come back as shards finish."""

    def __init__(self, archive: Path, options: JobOptions, workers: int = 1) -> None:
        self.archive, self.options, self.workers = archive, options, workers

    def run(self, shards: Sequence[Shard], done: ShardDone) -> None:
        if not shards:
            return
        if self.workers == 1 or len(shards) == 1:
            # torch and transformers: only where shards are translated
            from batch.engine import UnitTranslator

            translator = UnitTranslator(self.archive, self.options)
            for shard in shards:
                done(shard, translator.translate(shard.units))
            return
        with concurrent.futures.ProcessPoolExecutor(
            min(self.workers, len(shards)),
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_load_worker,
            initargs=(str(self.archive), json.dumps(self.options.to_json())),
        ) as pool:
            # A dead worker (OOM kill) fails the job with BrokenProcessPool: shards done so far stay on disk.
            running = {pool.submit(_translate_in_worker, shard.to_json()): shard for shard in shards}
            for finished in concurrent.futures.as_completed(running):
                done(running[finished], results_from_json(finished.result()))


_WORKER: dict[str, Any] = {}  # a LocalEngine worker process's translator


def _load_worker(archive: str, options: str) -> None:
    from batch.engine import UnitTranslator

    _die_with_parent()
    _WORKER["translator"] = UnitTranslator(Path(archive), JobOptions.from_json(json.loads(options)))


def _die_with_parent() -> None:
    """A SIGKILLed job leaves no worker behind: Linux kills this process when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(1)


def _translate_in_worker(units: str) -> str:
    return results_to_json(_WORKER["translator"].translate(Shard.units_from_json(units)))


class ShardActor:
    """A Ray Data actor: loads the archive once, then translates the shards it is given."""

    def __init__(self, archive: str, options: str) -> None:
        from batch.engine import UnitTranslator

        self.translator = UnitTranslator(Path(archive), JobOptions.from_json(json.loads(options)))

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        results = [
            results_to_json(self.translator.translate(Shard.units_from_json(str(payload))))
            for payload in batch["units"]
        ]
        return {"shard": batch["shard"], "results": np.array(results, dtype=object)}


class RayEngine:
    """Ray Data's map_batches over a pool of ShardActors, streaming results back as shards finish."""

    def __init__(self, archive: Path, options: JobOptions, threads: int, actors: int | None = None) -> None:
        self.archive, self.options, self.threads = archive, options, threads
        self.actors = actors

    def run(self, shards: Sequence[Shard], done: ShardDone) -> None:
        import ray

        if not shards:
            return
        by_number = {shard.number: shard for shard in shards}
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the job prints its own (sentences, sentences/s, ETA)
        context.print_on_execution_start = False
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        actors = self.actors or workers_for(self.threads, cluster_cpus)
        rows = [{"shard": shard.number, "units": shard.to_json()} for shard in shards]
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            ShardActor,
            fn_constructor_kwargs={
                "archive": str(self.archive),
                "options": json.dumps(self.options.to_json()),
            },
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=min(actors, len(rows))),
            num_cpus=self.threads,
        )
        for row in dataset.iter_rows():
            done(by_number[int(row["shard"])], results_from_json(str(row["results"])))


@contextlib.contextmanager
def ray_session(address: str | None, cpus: int | None = None) -> Iterator[None]:
    """Ray for the job: the cluster at `address`, else a local one sized to this host (started and
    stopped here). A session already initialized (a test module's) is used as it is."""
    import ray

    if ray.is_initialized():
        yield
        return
    session_dir = None
    if address is not None:
        # Every node must have this project installed (docs/BATCH.md): actors import batch and handlers.
        ray.init(address=address, logging_level=logging.WARNING)
    else:
        # Local workers are forked from this host's raylet: they find this checkout on PYTHONPATH.
        paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        ray.init(
            address="local",  # a new instance, never a cluster this host happens to run
            num_cpus=cpus or host_cpus(),
            object_store_memory=OBJECT_STORE_BYTES,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
        session_dir = ray_reaper.session_dir()
    # A local session's processes end with the job, even a SIGKILLed one (batch/ray_reaper.py).
    watcher = ray_reaper.watch(session_dir) if session_dir else None
    try:
        yield
    finally:
        ray.shutdown()
        if watcher is not None and session_dir is not None:
            watcher.kill()
            watcher.wait()
            ray_reaper.reap(session_dir)
