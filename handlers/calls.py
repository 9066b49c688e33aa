"""How TorchServe calls the worker (`torchserve_batching`), the one thing the two ways change.

- BatchCalls (`static`): each call brings a TorchServe batch; the worker admits it, steps the
  scheduler in its own thread until every sentence of it is decoded, and answers every request
  whole. Several workers may run.
- StepCalls (`continuous`, TorchServe's continuousBatching): requests stay open across calls;
  partition processes step all the time, and each call admits what is new, takes what finished
  for a time slice, and answers every open request with a chunk (handlers.open_requests).

Kept out of zh_en_handler.py because TorchServe requires the entry-point module to define exactly
one class.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from handlers.handler_config import ConfigError, HandlerConfig
from handlers.jobs import Job, admit_within
from handlers.open_requests import OpenRequests
from handlers.scheduling.inline import InlineDriver
from handlers.scheduling.partition_processes import ProcessPartitions
from handlers.scheduling.partitions import Driver
from handlers.scheduling.step_scheduler import StepScheduler


class BatchCalls:
    whole_answers = True  # every request is answered within its call
    holds_open = False
    loading_threads: int | None = None  # the worker decodes: config.threads from the start

    def __init__(self, config: HandlerConfig) -> None:
        self.config = config

    def driver(self, schedulers: Sequence[StepScheduler]) -> Driver:
        return InlineDriver(schedulers[0])

    def partitions(self) -> int:
        return 1

    def request_keys(self, context: Any, count: int, requests: OpenRequests) -> list[Hashable]:
        """A call answers its whole batch: what the last call opened is closed."""
        requests.close_missing(set())
        return list(range(count))

    def admit(self, jobs: list[Job]) -> None:
        admit_within(jobs, self.config.max_sentences_per_batch)  # what one batch may decode

    def decode(self, requests: OpenRequests) -> None:
        requests.decode_all()

    def finish(self, context: Any, more: list[bool | None], milliseconds: float) -> None:
        context.metrics.add_time("HandlerTime", round(milliseconds, 2), None, "ms")


class StepCalls:
    whole_answers = False
    holds_open = True
    loading_threads: int | None = 1  # the partitions decode, with config.threads each, once forked

    def __init__(self, config: HandlerConfig, yaml: dict[str, Any]) -> None:
        if not yaml.get("continuousBatching"):
            raise ConfigError(
                "torchserve_batching: continuous needs continuousBatching: true in the model-config yaml"
            )
        if max(yaml.get("minWorkers", 1), yaml.get("maxWorkers", 1)) > 1:
            # TorchServe 0.12 polls new jobs under one lock per model; an idle worker waits for a
            # job while holding it, so a second worker would stall every open request of the first
            # until the next request arrives. One worker, with step_partitions for the cores.
            raise ConfigError(
                "torchserve_batching: continuous needs minWorkers: 1 and maxWorkers: 1 "
                "(use step_partitions for cores)"
            )
        self.config = config

    def driver(self, schedulers: Sequence[StepScheduler]) -> Driver:
        return ProcessPartitions(schedulers, self.config.threads)

    def partitions(self) -> int:
        return self.config.step_partitions

    def request_keys(self, context: Any, count: int, requests: OpenRequests) -> list[Hashable]:
        """Open requests come back in later calls by their TorchServe ids; one missing was given up."""
        keys: list[Hashable] = [context.get_request_id(index) for index in range(count)]
        requests.close_missing(set(keys))
        return keys

    def admit(self, jobs: list[Job]) -> None:
        """Every request is admitted: its sentences wait in the scheduler for rows."""

    def decode(self, requests: OpenRequests) -> None:
        requests.advance(self.config.step_slice_ms / 1000, self.config.backlog_slice_ms / 1000)

    def finish(self, context: Any, more: list[bool | None], milliseconds: float) -> None:
        # TorchServe's ts_stream_next: a request's stream ends when its criterion says so;
        # None sends a whole (unstreamed) response.
        context.stopping_criteria = [lambda _, more=flag: None if more is None else not more for flag in more]


Calls = BatchCalls | StepCalls


def calls_for(config: HandlerConfig, yaml: dict[str, Any]) -> Calls:
    if config.torchserve_batching == "continuous":
        return StepCalls(config, yaml)
    if yaml.get("continuousBatching"):
        # TorchServe would call again for requests a static worker has already answered whole.
        raise ConfigError(
            "torchserve_batching: static needs continuousBatching unset or false in the model-config yaml"
        )
    return BatchCalls(config)
