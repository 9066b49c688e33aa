"""Partitions as processes forked from the worker once its model is loaded: one GIL per core.

With partitions on threads, two partitions and TorchServe's main thread took turns on one GIL:
under load each partition thread ran only about two thirds of the time
(bench/results/profile-step-scheduler.txt), while two static workers are two processes. Here each
partition steps in its own process, and the worker's main thread only talks to TorchServe.

Forked after the model is loaded, every partition shares the worker's weights page for page
(nothing writes them), so a partition costs its running batch and its Python heap, not a model.
The worker's own StepSchedulers are never stepped: each child steps its copy, and a replacement
is forked from the same pristine one.

Threads: GNU OpenMP (torch's intra-op pool on Linux) does not survive fork. A child that inherits a
started pool of more than one thread waits forever in its first parallel region: with `threads: 2`
a partition never finished a step (found by `make layout`, 2026-11-28). So the worker loads and
warms up with one thread, whose regions start no pool (handlers.calls.StepCalls.loading_threads),
and each partition sets its own `threads` once forked.

A partition keeps only its pipe and the standard streams: inherited descriptors are closed so that
TorchServe's socket to the worker closes when the worker dies, and the kernel kills a partition
whose worker is gone (PR_SET_PDEATHSIG). A partition that dies (killed, or a step failed: exit 70)
is replaced by its reader thread with a fresh one that is given the sentences it had not finished
(handlers.scheduling.partitions): no request is lost. One that keeps dying (RestartBudget) takes
the worker down instead, as before restarts: TorchServe answers its open requests with an error
and starts a new one.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import NoReturn

from handlers.model.translator import configure_threads
from handlers.scheduling.partitions import (
    STEP_FAILED_EXIT,
    STOP,
    Message,
    Partitions,
    RestartBudget,
    step_partition,
)
from handlers.scheduling.step_scheduler import StepScheduler

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1


class ProcessPartitions(Partitions):
    def __init__(
        self, partitions: Sequence[StepScheduler], threads: int = 1, restarts: int = 3, window: float = 60.0
    ) -> None:
        super().__init__(len(partitions))
        self._schedulers = list(partitions)
        self._threads = threads
        self._budgets = [RestartBudget(restarts, window) for _ in partitions]
        self._sending = [threading.Lock() for _ in partitions]
        self._stopping = False
        self._connections: list[Connection] = []
        self.pids: list[int] = []
        for index in range(self.count):
            connection, pid = self._fork(index, [])
            self._connections.append(connection)
            self.pids.append(pid)
        self._readers = [
            threading.Thread(
                target=self._read, args=(index,), name=f"step-partition-{index}-reader", daemon=True
            )
            for index in range(self.count)
        ]
        for reader in self._readers:
            reader.start()

    def stop(self) -> None:
        """End every partition after its current step and wait for it; none is replaced from here on.

        A worker's partitions also end on their own when the worker does (PR_SET_PDEATHSIG).
        """
        self._stopping = True  # a reader that sees it no longer replaces its partition
        for index in range(self.count):
            with self._sending[index], contextlib.suppress(OSError):  # OSError: it is gone already
                self._connections[index].send(STOP)
        for reader in self._readers:
            reader.join()

    def _send(self, index: int, generation: int, message: Message) -> None:
        with self._sending[index]:
            if generation != self._generations[index]:
                return  # the partition it was meant for died; its replacement was given this work
            with contextlib.suppress(OSError):  # it is dying: its reader replaces it, with this work
                self._connections[index].send(message)

    def _read(self, index: int) -> None:
        while True:
            try:
                report = self._connections[index].recv()
            except (EOFError, OSError):
                pid = self.pids[index]
                how = _reap(pid)
                if self._stopping:
                    return
                if not self._budgets[index].allow(time.monotonic()):
                    self._give_up(index, pid, how)
                    return
                if not self._replace(index, pid, how):
                    return
                continue
            self._record(index, report)

    def _replace(self, index: int, dead: int, how: str) -> bool:
        """Fork a fresh partition in place of `dead`, with its unfinished sentences; False if stopping.

        Forking from this reader thread while others run is safe because the child needs none of
        the locks they may hold: it uses only its new pipe, its StepScheduler and torch, none of
        them touched by other threads; Python resets the GIL, the import lock and logging's
        locks in the child, and glibc its malloc locks. The _sending lock held here is the
        worker's alone (the child never sends through it); holding it keeps new messages for
        this partition back until the replacement exists, so they reach it after its work. This
        thread lives as long as the partition it forked, as PR_SET_PDEATHSIG requires (it
        fires when the forking thread ends).
        """
        with self._sending[index]:
            if self._stopping:
                return False
            work = self._restarted(index)
            connection, pid = self._fork(index, work)
            self._connections[index].close()
            self._connections[index], self.pids[index] = connection, pid
        sentences = sum(len(submission.ids) for _, (submission,) in work)
        logger.warning(
            "step partition %d (pid %d) %s; replaced by pid %d, resubmitted %d unfinished sentences "
            "of %d requests",
            index,
            dead,
            how,
            pid,
            sentences,
            len(work),
        )
        return True

    def _give_up(self, index: int, dead: int, how: str) -> None:
        budget = self._budgets[index]
        logger.error(
            "step partition %d (pid %d) %s, after %d restarts within %.0f s; exiting so that "
            "TorchServe restarts the worker",
            index,
            dead,
            how,
            budget.restarts,
            budget.window,
        )
        logging.shutdown()
        os._exit(STEP_FAILED_EXIT)

    def _fork(self, index: int, work: list[Message]) -> tuple[Connection, int]:
        """A child stepping a copy of partition `index`'s scheduler, starting with `work`."""
        ours, theirs = Pipe()
        pid = os.fork()
        if pid == 0:
            _partition_main(theirs, self._schedulers[index], work, self._threads)
        theirs.close()
        return ours, pid


def _reap(pid: int) -> str:
    """Wait for a partition that closed its pipe to end; how it ended, for the log."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "is gone"
    code = os.waitstatus_to_exitcode(status)
    return f"was killed by signal {-code}" if code < 0 else f"exited with {code}"


def _partition_main(
    connection: Connection, partition: StepScheduler, work: list[Message], threads: int
) -> NoReturn:
    """A forked partition: step until told to stop or the worker goes away (exit 0), or a step
    fails (exit 70)."""
    code = 0
    try:
        _die_with(os.getppid())
        _close_inherited_descriptors(keep=connection.fileno())
        configure_threads(threads)

        def receive(block: bool) -> list[Message]:
            messages = [connection.recv()] if block else []
            while connection.poll():
                messages.append(connection.recv())
            return messages

        step_partition(partition, receive, connection.send, work)
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
