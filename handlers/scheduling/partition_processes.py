"""Partitions as processes forked from the worker once its model is loaded: one GIL per core.

With partitions on threads, two partitions and TorchServe's main thread took turns on one GIL:
under load each partition thread ran only about two thirds of the time
(bench/results/profile-step-scheduler.txt), while two static workers are two processes. Here each
partition steps in its own process, and the worker's main thread only talks to TorchServe.

Forked after the model is loaded, every partition shares the worker's weights page for page
(nothing writes them), so a partition costs its running batch and its Python heap, not a model.
The worker has no threads of its own at the fork (TorchServe's Python worker is single-threaded
and intra-op threads are 1 per partition), so nothing is forked mid-lock.

A partition keeps only its pipe and the standard streams: inherited descriptors are closed so that
TorchServe's socket to the worker closes when the worker dies, and the kernel kills a partition
whose worker is gone (PR_SET_PDEATHSIG). If a partition dies, the worker exits, as it does when a
step fails on a thread: TorchServe answers its open requests with an error and starts a new one.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
from collections.abc import Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import NoReturn

from handlers.scheduling.partitions import STEP_FAILED_EXIT, Message, Partitions, step_partition
from handlers.scheduling.step_scheduler import StepScheduler

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1


class ProcessPartitions(Partitions):
    def __init__(self, partitions: Sequence[StepScheduler]) -> None:
        super().__init__(len(partitions))
        self._connections: list[Connection] = []
        self.pids: list[int] = []
        for partition in partitions:
            ours, theirs = Pipe()
            pid = os.fork()
            if pid == 0:
                _partition_main(theirs, partition)
            theirs.close()
            self._connections.append(ours)
            self.pids.append(pid)
        self._sending = [threading.Lock() for _ in partitions]
        for index in range(self.count):
            name = f"step-partition-{index}-reader"
            threading.Thread(target=self._read, args=(index,), name=name, daemon=True).start()

    def _send(self, index: int, message: Message) -> None:
        with self._sending[index]:
            self._connections[index].send(message)

    def _read(self, index: int) -> None:
        connection = self._connections[index]
        while True:
            try:
                report = connection.recv()
            except (EOFError, OSError):
                if self.closing:
                    return
                logger.error(
                    "step partition %d (pid %d) is gone; exiting so that TorchServe restarts the worker",
                    index,
                    self.pids[index],
                )
                logging.shutdown()
                os._exit(STEP_FAILED_EXIT)
            self._record(index, report)


def _partition_main(connection: Connection, partition: StepScheduler) -> NoReturn:
    """A forked partition: step until the worker goes away (exit 0) or a step fails (exit 70)."""
    code = 0
    try:
        _die_with(os.getppid())
        _close_inherited_descriptors(keep=connection.fileno())

        def receive(block: bool) -> list[Message]:
            messages = [connection.recv()] if block else []
            while connection.poll():
                messages.append(connection.recv())
            return messages

        step_partition(partition, receive, connection.send)
    except (EOFError, BrokenPipeError):
        pass  # the worker is gone
    except BaseException:
        logger.exception("a decoder step failed in step partition pid %d", os.getpid())
        code = STEP_FAILED_EXIT
    finally:
        logging.shutdown()
        os._exit(code)


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when `parent` exits (Linux; elsewhere the pipe's EOF does)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def _close_inherited_descriptors(keep: int) -> None:
    """Everything but the standard streams and `keep`: TorchServe's socket must close with the worker."""
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
