"""Step schedulers side by side, each stepping its own running batch on its own thread.

One TorchServe worker must hold every open request (docs/SCHEDULING.md: continuous batching
cannot run two workers), so the cores are used inside it. Intra-op threads help the large
matrix products only; the many small operations of a decoder step run on one core. Two running
batches on two Python threads, each with one intra-op thread, use both cores throughout, as two
static workers do (torch releases the GIL inside its operations). A request goes wholly to the
partition with the least work; its sentences decode exactly as in any other batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor

from handlers.search import RowLimits
from handlers.step_scheduler import SchedulerState, SentenceKey, StepScheduler

Finished = list[tuple[SentenceKey, list[int]]]


class ThreadedSchedulers:
    def __init__(self, partitions: Sequence[StepScheduler]) -> None:
        self.partitions = list(partitions)
        self._home: dict[Hashable, StepScheduler] = {}
        self._pool = ThreadPoolExecutor(len(self.partitions), thread_name_prefix="step-scheduler")

    def submit(
        self, request: Hashable, ids: Sequence[list[int]], limits: Sequence[RowLimits], beams: int
    ) -> None:
        home = min(self.partitions, key=_work)
        home.submit(request, ids, limits, beams)
        self._home[request] = home

    def cancel(self, request: Hashable) -> None:
        home = self._home.pop(request, None)
        if home is not None:
            home.cancel(request)

    @property
    def busy(self) -> bool:
        return any(partition.busy for partition in self.partitions)

    def state(self) -> SchedulerState:
        states = [partition.state() for partition in self.partitions]
        return SchedulerState(
            waiting_sentences=sum(s.waiting_sentences for s in states),
            running_rows=sum(s.running_rows for s in states),
            cohorts=sum(s.cohorts for s in states),
        )

    def run(self, stop: Callable[[Finished], bool], seconds: float) -> Finished:
        """Every busy partition steps on its own thread until `stop` says so for any of them."""
        lock, halt = threading.Lock(), threading.Event()

        def shared_stop(finished: Finished) -> bool:
            with lock:  # `stop` keeps the caller's state: one partition at a time
                if stop(finished):
                    halt.set()
            return halt.is_set()

        busy = [partition for partition in self.partitions if partition.busy]
        futures = [self._pool.submit(partition.run, shared_stop, seconds) for partition in busy]
        finished = [item for future in futures for item in future.result()]
        self._home = {request: home for request, home in self._home.items() if home.holds(request)}
        return finished


def _work(partition: StepScheduler) -> int:
    state = partition.state()
    return state.running_rows + state.waiting_sentences
