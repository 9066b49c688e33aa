"""Where shards are translated: in this process, or by a pool of Ray actors (Ray Data).

Both run the same `UnitTranslator` on the same shards; Ray only decides where. Ray Data streams the
shards through `map_batches` over an actor pool, one actor per core by default, each loading the
archive once and translating one shard per call with the archive's intra-op threads (1 as
shipped: `make layout`'s one worker per core, one thread each).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from batch.shards import Shard, results_from_json, results_to_json
from batch.units import JobOptions, UnitResult

ShardDone = Callable[[Shard, list[UnitResult]], None]
REPO_ROOT = Path(__file__).resolve().parent.parent
# Shards travel as small JSON strings: a small object store leaves the host's memory to the models.
OBJECT_STORE_BYTES = 96 * 1024 * 1024


class Engine(Protocol):
    def run(self, shards: Sequence[Shard], done: ShardDone) -> None: ...


def host_cpus() -> int:
    return len(os.sched_getaffinity(0))


class LocalEngine:
    """Every shard in this process, one after another (the same code as an actor's)."""

    def __init__(self, archive: Path, options: JobOptions) -> None:
        self.archive, self.options = archive, options

    def run(self, shards: Sequence[Shard], done: ShardDone) -> None:
        if not shards:
            return
        from batch.engine import UnitTranslator  # torch and transformers: only where shards are translated

        translator = UnitTranslator(self.archive, self.options)
        for shard in shards:
            done(shard, translator.translate(shard.units))


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
        actors = self.actors or max(1, cluster_cpus // self.threads)
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
    try:
        yield
    finally:
        ray.shutdown()
