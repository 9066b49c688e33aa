"""Step schedulers side by side, each stepping its own running batch on its own thread, all the time.

One TorchServe worker must hold every open request (docs/SCHEDULING.md: continuous batching
cannot run two workers), so the cores are used inside it. Intra-op threads help the large
matrix products only; the many small operations of a decoder step run on one core. So each
partition steps its running batch on its own thread, with one intra-op thread, as a static
worker would (torch releases the GIL inside its operations).

The partitions never wait for the handler: they step whenever they hold work. A handler call
only exchanges work with them (`submit`, `cancel`, then `run` collects what finished until the
caller has news). A py-spy profile of the first version, which stepped the partitions only
inside the call, found each partition thread idle a third of the time: waiting for the other
partition to end its step, and for TorchServe's round trip between calls.

A partition's scheduler state is touched only by its own thread: submissions and cancellations
reach it through an inbox. A request goes wholly to the partition with the least work. If a
step raises, the worker process exits: TorchServe answers its open requests with an error and
starts a new worker, rather than leaving them open forever.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from functools import partial

import torch

from handlers.search import RowLimits
from handlers.step_scheduler import SchedulerState, SentenceKey, StepScheduler

logger = logging.getLogger(__name__)
Finished = list[tuple[SentenceKey, list[int]]]
STEP_FAILED_EXIT = 70  # EX_SOFTWARE


class ThreadedSchedulers:
    def __init__(self, partitions: Sequence[StepScheduler]) -> None:
        self.partitions = list(partitions)
        self._changed = threading.Condition()
        # Everything below is guarded by _changed.
        self._inbox: list[list[Callable[[], None]]] = [[] for _ in self.partitions]
        self._queued_work = [0] * len(self.partitions)  # submitted rows not yet in the partition
        self._states = [partition.state() for partition in self.partitions]
        self._busy = [False] * len(self.partitions)
        self._home: dict[Hashable, int] = {}
        self._finished: Finished = []
        for index in range(len(self.partitions)):
            name = f"step-scheduler-{index}"
            threading.Thread(target=self._loop, args=(index,), name=name, daemon=True).start()

    def submit(
        self, request: Hashable, ids: Sequence[list[int]], limits: Sequence[RowLimits], beams: int
    ) -> None:
        if not ids:
            return
        with self._changed:
            index = min(range(len(self.partitions)), key=self._work)
            self._inbox[index].append(partial(self.partitions[index].submit, request, ids, limits, beams))
            self._queued_work[index] += len(ids) * beams
            self._home[request] = index
            self._changed.notify_all()

    def cancel(self, request: Hashable) -> None:
        with self._changed:
            index = self._home.pop(request, None)
            if index is not None:
                self._inbox[index].append(partial(self.partitions[index].cancel, request))
                self._changed.notify_all()

    @property
    def busy(self) -> bool:
        with self._changed:
            return self._busy_now()

    def state(self) -> SchedulerState:
        with self._changed:
            states = list(self._states)
        return SchedulerState(
            waiting_sentences=sum(s.waiting_sentences for s in states),
            running_rows=sum(s.running_rows for s in states),
            cohorts=sum(s.cohorts for s in states),
        )

    def run(self, stop: Callable[[Finished], bool], seconds: float) -> Finished:
        """Collect finished sentences until `stop(them)` says so, the time slice ends, or all is done.

        `stop` may take the sentences it is given out of the list; what it leaves is returned.
        """
        deadline, finished = time.monotonic() + seconds, []
        while True:
            with self._changed:
                if not self._finished and self._busy_now():
                    self._changed.wait(max(0.0, deadline - time.monotonic()))
                finished += self._finished
                self._finished = []
                busy = self._busy_now()
            if stop(finished) or time.monotonic() >= deadline or not busy:
                return finished

    def _busy_now(self) -> bool:
        """Work in a partition, on its way there, or finished and not yet collected."""
        return any(self._busy) or any(self._inbox) or bool(self._finished)

    def _work(self, index: int) -> int:
        state = self._states[index]
        return state.running_rows + state.waiting_sentences + self._queued_work[index]

    def _loop(self, index: int) -> None:
        partition = self.partitions[index]
        with torch.inference_mode():
            while True:
                with self._changed:
                    while not self._inbox[index] and not self._busy[index]:
                        self._changed.wait()
                    actions, self._inbox[index] = self._inbox[index], []
                    self._queued_work[index] = 0
                try:
                    for action in actions:
                        action()
                    partition.admit()
                    finished = partition.step()
                except Exception:
                    logger.exception("a decoder step failed; exiting so that TorchServe restarts the worker")
                    logging.shutdown()
                    os._exit(STEP_FAILED_EXIT)
                ended = {key.request for key, _ in finished if not partition.holds(key.request)}
                state = partition.state()
                with self._changed:
                    self._finished += finished
                    self._states[index], self._busy[index] = state, partition.busy
                    for request in ended:
                        if self._home.get(request) == index:
                            del self._home[request]
                    self._changed.notify_all()
