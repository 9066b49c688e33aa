"""Step schedulers side by side, each stepping its own running batch all the time, on its own core.

One TorchServe worker must hold every open request (docs/SCHEDULING.md: continuous batching
cannot run two workers), so the cores are used inside it. Intra-op threads help the large matrix
products only; the many small operations of a decoder step run on one core. So the worker splits
its rows into partitions, each a StepScheduler stepping its own running batch with one intra-op
thread, as a static worker would.

The partitions never wait for the handler: they step whenever they hold work. A handler call only
exchanges work with them (`submit`, `cancel`, then `run` collects what finished until the caller
has news). A request goes wholly to the partition with the least work.

Where a partition runs is the subclass's business (handlers.scheduling.partition_processes);
this module keeps what the handler sees: placement, what each partition last reported, and the
finished sentences not yet collected. A worker that admits only at batch boundaries steps one
scheduler in its own thread instead (handlers.scheduling.inline); both are a `Driver`. A
partition's scheduler is touched only by the loop that steps it (`step_partition`), which
receives submissions and cancellations as messages and reports after every step.

A partition is stateless compute: this side remembers each request's sentences that have not
finished, so a partition that dies can be replaced by a fresh one given exactly those
(`_restarted`). What the dead one was sent and never applied is void, not resent: every message
carries its partition's generation, and the replacement's work already includes it.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from handlers.model.heap_trim import IDLE_TRIM_SECONDS, IdleTrim
from handlers.scheduling.step_scheduler import SchedulerState, SentenceKey, StepScheduler, Submission

# Each finished sentence with its hypotheses' generated ids, best first (as many as it asked to keep).
Finished = list[tuple[SentenceKey, list[list[int]]]]
STEP_FAILED_EXIT = 70  # EX_SOFTWARE
# A message to a partition: the StepScheduler method to call and its arguments, or STOP.
Message = tuple[str, tuple[Any, ...]]
MESSAGE_METHODS = ("submit", "cancel")
STOP: Message = ("stop", ())


@dataclass(frozen=True)
class StepReport:
    """What a partition says after a step: what finished, its state, and how far it has read."""

    finished: Finished
    state: SchedulerState
    busy: bool
    applied: int  # messages applied so far


def step_partition(
    partition: StepScheduler,
    receive: Callable[[bool], list[Message]],
    report: Callable[[StepReport], None],
    start: Sequence[Message] = (),
) -> None:
    """Step until STOP: apply the messages (`receive(block)` blocks only while idle), admit, step, report.

    `start`: messages applied before any received (a replacement partition's work). An idle
    partition gives its heap back after a while (handlers.model.heap_trim).
    """
    applied, heap, messages = 0, IdleTrim(IDLE_TRIM_SECONDS), list(start)
    with torch.inference_mode():
        while True:
            idle = not partition.busy and not messages
            if idle:
                heap.idle()
            messages += receive(idle)
            heap.busy()
            for name, args in messages:
                if (name, args) == STOP:
                    return
                if name not in MESSAGE_METHODS:
                    raise ValueError(f"a partition takes {MESSAGE_METHODS}, not {name!r}")
                getattr(partition, name)(*args)
                applied += 1
            messages = []
            partition.admit()
            finished = partition.step()
            report(StepReport(finished, partition.state(), partition.busy, applied))


@dataclass
class RestartBudget:
    """How often a partition may be replaced: at most `restarts` times within `window` seconds.

    Past that it is not the partition but its work (a step that always fails on some input) or the
    host: the worker exits as it did before restarts, and TorchServe starts a new one.
    """

    restarts: int = 3
    window: float = 60.0
    _times: deque[float] = field(default_factory=deque)

    def allow(self, now: float) -> bool:
        """Whether a partition that died at `now` may be replaced (and if so, count it)."""
        while self._times and now - self._times[0] >= self.window:
            self._times.popleft()
        if len(self._times) >= self.restarts:
            return False
        self._times.append(now)
        return True


@dataclass
class _Unfinished:
    """A request in a partition, and its sentences there not reported finished: a replacement's work."""

    partition: int
    submission: Submission
    left: dict[int, None]  # sentence indices in the request, in order

    def resubmission(self) -> Message:
        return ("submit", (self.submission.only(self.left),))


class Driver(Protocol):
    """What the handler's decoding asks of the step scheduler(s), wherever they step."""

    def submit(self, submission: Submission) -> None: ...

    def cancel(self, request: Hashable) -> None: ...

    def state(self) -> SchedulerState: ...

    def run(self, stop: Callable[[Finished], bool], seconds: float) -> Finished:
        """Collect finished sentences until `stop(them)` says so, the time slice ends, or all is done.

        `stop` may take the sentences it is given out of the list; what it leaves is returned.
        """
        ...


class Partitions(ABC):
    """The handler's side of the partitions, wherever they run."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._changed = threading.Condition()
        # Everything below is guarded by _changed.
        self.sent = [0] * count  # messages sent to each partition (submissions and cancellations)
        self._applied = [0] * count  # of those, applied (as last reported)
        self._queued_work = [0] * count  # rows submitted and not yet reported applied
        self._states = [SchedulerState(0, 0, 0)] * count
        self._busy = [False] * count
        self._unfinished: dict[Hashable, _Unfinished] = {}  # by request, in arrival order
        self._generations = [0] * count  # how many times each partition was replaced
        self._finished: Finished = []

    @abstractmethod
    def _send(self, index: int, generation: int, message: Message) -> None:
        """Deliver a message to partition `index`, in order, and wake it; drop it if the partition
        was replaced since `generation` (the replacement was given its work). Called without
        _changed: a pipe may block until the partition reads, and the partition's reports need it."""

    def submit(self, submission: Submission) -> None:
        """StepScheduler.submit on the partition with the least work."""
        if not submission.ids:
            return
        with self._changed:
            index = min(range(self.count), key=self._work)
            self.sent[index] += 1
            self._queued_work[index] += len(submission.ids) * submission.beams
            left = dict.fromkeys(submission.numbers)
            self._unfinished[submission.request] = _Unfinished(index, submission, left)
            generation = self._generations[index]
        self._send(index, generation, ("submit", (submission,)))

    def cancel(self, request: Hashable) -> None:
        with self._changed:
            unfinished = self._unfinished.pop(request, None)
            if unfinished is None:
                return
            index = unfinished.partition
            self.sent[index] += 1
            generation = self._generations[index]
        self._send(index, generation, ("cancel", (request,)))

    @property
    def busy(self) -> bool:
        with self._changed:
            return self._busy_now()

    def state(self) -> SchedulerState:
        with self._changed:
            states = list(self._states)
        return SchedulerState(
            waiting_sentences=sum(s.waiting_sentences for s in states),
            backlog=sum(s.backlog for s in states),
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

    def _record(self, index: int, report: StepReport) -> None:
        """A partition's report after a step: keep it and wake whoever waits in `run`."""
        with self._changed:
            self._finished += report.finished
            self._states[index], self._busy[index] = report.state, report.busy
            self._applied[index] = report.applied
            if report.applied == self.sent[index]:
                self._queued_work[index] = 0
            for key, _ in report.finished:
                unfinished = self._unfinished.get(key.request)
                if unfinished is not None and unfinished.partition == index:
                    unfinished.left.pop(key.index, None)
                    if not unfinished.left:
                        del self._unfinished[key.request]
            self._changed.notify_all()

    def _restarted(self, index: int) -> list[Message]:
        """Partition `index` is being replaced by a fresh one: its work, a submission per request
        with sentences it had not reported finished (cancelled requests have none), in arrival
        order. Whatever was sent to the old one is void from here on.

        The caller holds off every delivery to `index` (the subclass's send lock) until the
        replacement has this work, so that later messages reach it after it.
        """
        with self._changed:
            self._generations[index] += 1
            held = [u for u in self._unfinished.values() if u.partition == index]
            self.sent[index], self._applied[index] = len(held), 0
            self._queued_work[index] = sum(len(u.left) * u.submission.beams for u in held)
            self._states[index], self._busy[index] = SchedulerState(0, 0, 0), False
            return [unfinished.resubmission() for unfinished in held]

    def _busy_now(self) -> bool:
        """Work in a partition, on its way there, or finished and not yet collected."""
        unread = any(sent != applied for sent, applied in zip(self.sent, self._applied, strict=True))
        return any(self._busy) or unread or bool(self._finished)

    def _work(self, index: int) -> int:
        state = self._states[index]
        return state.running_rows + state.waiting_sentences + self._queued_work[index]
