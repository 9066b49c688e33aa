"""A partition that dies is replaced and given back its unfinished sentences; one that keeps dying
ends the worker.

On the lively tiny stand-in (int8): a partition process is SIGKILLed while requests are running
and waiting in it, and every sentence of every request still comes back once, with the ids it
gets decoded alone. The bookkeeping behind it (what a replacement is given) is checked on the
base class, and the restart bound both as a decision and as what a worker does when it is spent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import cast

import pytest

from bench.common import sample_sentences
from handlers.handler_config import HandlerConfig
from handlers.model.search import RowLimits
from handlers.model.translator import Translator
from handlers.scheduling.partition_processes import ProcessPartitions
from handlers.scheduling.partitions import Message, Partitions, RestartBudget, StepReport
from handlers.scheduling.run import decode_ids
from handlers.scheduling.step_scheduler import SchedulerState, SentenceKey, StepScheduler, Submission
from tests.partitions import kill_partition, wait_replaced
from tests.unit.test_step_scheduler import requests_of, scheduler

SENTENCES = 60
BEAMS = 2


@pytest.fixture(scope="module")
def translator(lively_model_dir: Path) -> Translator:
    return Translator.load(lively_model_dir, HandlerConfig(variant="int8", warmup=False).model)


def decoded_alone(
    translator: Translator, ids: Sequence[list[int]], limits: Sequence[RowLimits]
) -> list[list[int]]:
    return [
        decode_ids(translator, [row], [limit], BEAMS)[0][0] for row, limit in zip(ids, limits, strict=True)
    ]


def gated(partition: StepScheduler, gate: Path) -> StepScheduler:
    """`partition` with every step after its first held until the file `gate` exists, in the processes
    forked from it: what runs in it after one step still runs, and what waits still waits, until then.
    A file, not a multiprocessing.Event: setting one waits on its sleepers, and one is killed."""
    step, steps = partition.step, [0]

    def held_step() -> list[tuple[SentenceKey, list[list[int]]]]:
        steps[0] += 1
        while steps[0] > 1 and not gate.exists():
            time.sleep(0.01)
        return step()

    partition.step = held_step  # type: ignore[method-assign]
    return partition


def test_a_killed_partition_is_replaced_and_every_sentence_comes_back_once(
    translator: Translator, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, SENTENCES)])
    # Every sentence runs to its cap (min = max new tokens, at least 10): none finishes in one step.
    limits = [RowLimits(cap, cap) for cap in (min(40, 2 * len(row) + 10) for row in ids)]
    alone = decoded_alone(translator, ids, limits)
    members_of = requests_of(SENTENCES)
    # 4 rows at beam 2: each partition runs 2 sentences and keeps the rest waiting. The partitions
    # hold after their first step until the kill: a fast decoder drained them first in CI, twice.
    gate = tmp_path / "released"
    processes = ProcessPartitions([gated(scheduler(translator, row_budget=4), gate) for _ in range(2)])
    came_back: list[SentenceKey] = []
    scheduled: dict[int, list[list[int]]] = {}

    def collect(stop: bool) -> None:
        for key, ranked in processes.run(lambda _: stop, seconds=60.0):
            came_back.append(key)
            scheduled[members_of[cast(int, key.request)][key.index]] = ranked

    def submit(number: int) -> None:
        members = members_of[number]
        lead, keep = number % 8 == 3, 1 + number % 3 // 2  # some stream, some ask for an alternative
        processes.submit(
            Submission.of(number, [ids[i] for i in members], [limits[i] for i in members], BEAMS, lead, keep)
        )

    half = len(members_of) // 2
    try:
        for number in range(half):
            submit(number)
        deadline = time.monotonic() + 30
        while not all(s.running_rows for s in processes._states) and time.monotonic() < deadline:
            collect(stop=True)  # until both partitions report their first step
        running = processes._states[0].running_rows // BEAMS
        held = sum(len(u.left) for u in processes._unfinished.values() if u.partition == 0)
        assert 0 < running < held, f"partition 0 must run sentences and keep more waiting: {running}, {held}"
        with caplog.at_level(logging.WARNING, logger="handlers.scheduling.partition_processes"):
            dead = kill_partition(processes, 0)
            for number in range(half, len(members_of)):  # some reach the dead one before its replacement
                submit(number)
            gate.touch()
            replacement = wait_replaced(processes, 0, dead)
            deadline = time.monotonic() + 120
            while processes.busy and time.monotonic() < deadline:
                collect(stop=False)
    finally:
        gate.touch()
        processes.stop()
    assert replacement != dead
    twice = [key for key, count in Counter(came_back).items() if count > 1]
    assert twice == [], f"sentences answered twice: {twice[:8]}"
    assert sorted(scheduled) == list(range(SENTENCES)), "every sentence of every request comes back"
    differ = [i for i in range(SENTENCES) if scheduled[i][0] != alone[i]]
    assert differ == [], f"sentences {differ[:8]} changed across the restart"
    keeps = {len(scheduled[members_of[n][0]]) for n in range(len(members_of)) if n % 3 == 2}
    assert keeps == {2}, "a resubmitted request keeps its alternatives"
    (restart,) = [r.getMessage() for r in caplog.records if "replaced by" in r.getMessage()]
    assert f"step partition 0 (pid {dead}) was killed by signal 9; replaced by pid {replacement}" in restart


class RecordingPartitions(Partitions):
    """The base class with its messages kept instead of delivered; reports are fed by hand."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.delivered: list[tuple[int, Message]] = []

    def _send(self, index: int, generation: int, message: Message) -> None:
        if generation == self._generations[index]:
            self.delivered.append((index, message))

    def report(self, index: int, finished: Sequence[tuple[Hashable, int]]) -> None:
        keys = [(SentenceKey(request, number), [[1]]) for request, number in finished]
        self._record(index, StepReport(keys, SchedulerState(0, 0, 0), True, self.sent[index]))


def test_a_replacement_is_given_exactly_the_unfinished_sentences_of_uncancelled_requests() -> None:
    limits = [RowLimits(5)] * 4
    partitions = RecordingPartitions(2)
    # partition 0
    partitions.submit(Submission.of("document", [[1], [2], [3], [4]], limits, 4, lead=2, keep=3))
    partitions.submit(Submission.of("other", [[5]], limits[:1], 1))  # partition 1: less work
    partitions.submit(Submission.of("single", [[6]], limits[:1], 1))  # partition 1 again
    partitions.submit(Submission.of("cancelled", [[7], [8]], limits[:2], 1))
    partitions.report(0, [("document", 0), ("document", 2)])
    partitions.report(1, [("other", 0)])
    partitions.cancel("cancelled")
    assert [index for index, _ in partitions.delivered] == [0, 1, 1, 1, 1], "placed by least work"
    document = Submission("document", ((2,), (4,)), tuple(limits[:2]), 4, lead=2, keep=3, indices=(1, 3))
    assert partitions._restarted(0) == [("submit", (document,))]
    assert partitions._restarted(1) == [
        ("submit", (Submission("single", ((6,),), tuple(limits[:1]), 1, indices=(0,)),))
    ]
    # Messages meant for the replaced partitions are void: their work was handed over above.
    delivered = len(partitions.delivered)
    partitions._send(0, 0, ("cancel", ("document",)))
    assert len(partitions.delivered) == delivered
    assert partitions.busy, "the replacements have work the partitions have not reported applied"


def test_restarts_are_bounded_within_a_window() -> None:
    budget = RestartBudget(restarts=3, window=60.0)
    assert [budget.allow(now) for now in (0.0, 1.0, 2.0, 30.0)] == [True, True, True, False]
    assert budget.allow(60.0), "the first restart is out of the window"
    assert not budget.allow(60.5)


def test_a_partition_whose_step_always_fails_ends_the_worker_after_its_restarts(
    translator: Translator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    given_up = threading.Event()
    gave_up: list[tuple[int, str]] = []

    def give_up(self: ProcessPartitions, index: int, dead: int, how: str) -> None:  # instead of os._exit
        gave_up.append((index, how))
        given_up.set()

    monkeypatch.setattr(ProcessPartitions, "_give_up", give_up)
    failing = scheduler(translator)

    def step() -> list[tuple[SentenceKey, list[list[int]]]]:
        raise RuntimeError("a step that fails on every input")

    monkeypatch.setattr(failing, "step", step)  # copied into every process forked from here
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 1)])
    processes = ProcessPartitions([failing, scheduler(translator)], restarts=2)
    try:
        with caplog.at_level(logging.WARNING, logger="handlers.scheduling.partition_processes"):
            processes.submit(
                Submission.of("poison", ids, [RowLimits(5)], 1)
            )  # to partition 0: the first with least work
            assert given_up.wait(60), "the worker must give up once the restarts are spent"
    finally:
        processes.stop()
    assert gave_up == [(0, "exited with 70")]
    restarts = [r.getMessage() for r in caplog.records if "replaced by" in r.getMessage()]
    assert len(restarts) == 2 and all("exited with 70" in r and "1 unfinished" in r for r in restarts), (
        restarts
    )
