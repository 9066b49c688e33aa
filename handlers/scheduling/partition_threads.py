"""Partitions on threads of this process: for tests and in-process benchmarks.

torch releases the GIL inside its operations, but the Python between them (the search, the
scheduler, the handler's calls) holds it: two partition threads and TorchServe's main thread take
turns running Python (bench/results/profile-step-scheduler.txt), which is why the worker runs its
partitions as processes (handlers.scheduling.partition_processes). Both step the same StepScheduler the same
way (handlers.scheduling.partitions.step_partition), so a sentence's ids are the same on either.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from handlers.scheduling.partitions import STEP_FAILED_EXIT, Message, Partitions, StepReport, step_partition
from handlers.scheduling.step_scheduler import StepScheduler

logger = logging.getLogger(__name__)


class ThreadPartitions(Partitions):
    def __init__(self, partitions: Sequence[StepScheduler]) -> None:
        super().__init__(len(partitions))
        self.partitions = list(partitions)
        self._inbox: list[list[Message]] = [[] for _ in partitions]  # guarded by _changed
        for index in range(self.count):
            name = f"step-partition-{index}"
            threading.Thread(target=self._loop, args=(index,), name=name, daemon=True).start()

    def _send(self, index: int, message: Message) -> None:
        with self._changed:
            self._inbox[index].append(message)
            self._changed.notify_all()

    def _loop(self, index: int) -> None:
        def receive(block: bool) -> list[Message]:
            with self._changed:
                while block and not self._inbox[index]:
                    self._changed.wait()
                messages, self._inbox[index] = self._inbox[index], []
                return messages

        def report(step: StepReport) -> None:
            self._record(index, step)

        try:
            step_partition(self.partitions[index], receive, report)
        except Exception:
            logger.exception("a decoder step failed; exiting so that TorchServe restarts the worker")
            logging.shutdown()
            os._exit(STEP_FAILED_EXIT)
