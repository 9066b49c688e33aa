"""One step scheduler stepped in the worker's own thread, while the handler waits for it.

A worker that admits requests only at TorchServe's batch boundaries (`torchserve_batching: static`) has
nothing to do between calls: each call submits its batch and steps until every sentence of it
is done. Sentences still join the running batch as rows free up within the call, by the same
policy and with the same ids as in partition processes (handlers.scheduling.partitions).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

import torch

from handlers.model.heap_trim import IDLE_TRIM_SECONDS, IdleTrim
from handlers.scheduling.partitions import Finished
from handlers.scheduling.step_scheduler import SchedulerState, StepScheduler, Submission

# One idle timer per process, as the heap is the process's: a driver made for one call (decode_ids)
# left its timer armed, and it trimmed the heap in the middle of the next call's decode.
PROCESS_HEAP = IdleTrim(IDLE_TRIM_SECONDS)


class InlineDriver:
    def __init__(self, scheduler: StepScheduler) -> None:
        self.scheduler = scheduler
        self.heap = PROCESS_HEAP  # give the heap back once the process idles

    def submit(self, submission: Submission) -> None:
        self.scheduler.submit(submission)

    def cancel(self, request: Hashable) -> None:
        self.scheduler.cancel(request)

    def state(self) -> SchedulerState:
        return self.scheduler.state()

    def run(self, stop: Callable[[Finished], bool], seconds: float) -> Finished:
        finished: Finished = []
        deadline = time.monotonic() + seconds
        self.heap.busy()
        try:
            with torch.inference_mode():
                while self.scheduler.busy:
                    self.scheduler.admit()
                    finished += self.scheduler.step()
                    if stop(finished) or time.monotonic() >= deadline:
                        break
        finally:
            self.heap.idle()
        return finished
