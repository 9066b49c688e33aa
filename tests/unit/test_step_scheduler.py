"""The step scheduler: a sentence's ids are the same however it is scheduled (also on two partitions
stepping at once in processes), and admission is fair.

On the lively tiny stand-in, 200 sentences of mixed lengths, fp32 and int8, greedy and beam 4:
decoded alone, then through the scheduler with requests (single sentences and 5-sentence
documents) arriving while others are mid-flight, so most sentences join a running batch whose
other rows are at other positions.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from bench.common import sample_sentences
from handlers.handler_config import HandlerConfig, Variant
from handlers.model.decoding import FastDecoder
from handlers.model.search import RowLimits, RunningCohort
from handlers.model.translator import Translator
from handlers.scheduling.inline import InlineDriver
from handlers.scheduling.partition_processes import ProcessPartitions
from handlers.scheduling.partitions import Finished
from handlers.scheduling.step_scheduler import SentenceKey, StepScheduler, Submission
from tests.alone_decodes import SENTENCES, AloneDecodes

pytestmark = pytest.mark.long(seconds=51)  # seconds: make test starts the longest first


def scheduler(
    translator: Translator,
    row_budget: int = 64,
    max_cohorts: int = 8,
    document_rows_beside_interactive: int = 10**6,
    interactive_window: float = 0.0,
) -> StepScheduler:
    assert isinstance(translator.decoder, FastDecoder)
    pad_id = translator.tokenizer.pad_token_id
    return StepScheduler(
        translator.decoder,
        pad_id,
        row_budget,
        max_cohorts,
        document_rows_beside_interactive,
        interactive_window,
    )


def run(steps: StepScheduler, stop: Callable[[Finished], bool]) -> Finished:
    """Step in this thread, as a static worker does, until `stop(finished so far)` or nothing is left."""
    return InlineDriver(steps).run(stop, seconds=60.0)


def record_cohorts(steps: StepScheduler, monkeypatch: pytest.MonkeyPatch) -> list[list[SentenceKey]]:
    """The sentences of each cohort the scheduler starts, in order (filled as it runs)."""
    cohorts: list[list[SentenceKey]] = []
    start = steps.decoder.start

    def recording(owners: list[SentenceKey], *rest: Any) -> RunningCohort:
        cohorts.append(list(owners))
        return start(owners, *rest)

    monkeypatch.setattr(steps.decoder, "start", recording)
    return cohorts


def requests_of(count: int) -> list[list[int]]:
    """Sentence indices per request: every fourth request is a 5-sentence document."""
    requests: list[list[int]] = []
    start = 0
    while start < count:
        size = 5 if len(requests) % 4 == 3 else 1
        requests.append(list(range(start, min(count, start + size))))
        start += size
    return requests


@pytest.fixture(scope="module", params=["fp32", "int8"])
def translator(request: pytest.FixtureRequest, lively_model_dir: Path) -> Translator:
    variant: Variant = request.param
    return Translator.load(lively_model_dir, HandlerConfig(variant=variant, warmup=False).model)


@pytest.mark.parametrize(("beams", "partitions"), [(1, 1), (4, 1), (4, 2)])
def test_a_sentence_decodes_the_same_alone_and_joined_mid_flight(
    translator: Translator, alone_decodes: AloneDecodes, beams: int, partitions: int
) -> None:
    reference = alone_decodes(translator.config.variant, beams)
    ids, limits, alone = reference.ids, reference.limits, reference.alone
    assert len({len(out) for out in alone}) > 3, "the model must end sentences at varied lengths"

    # One partition steps in this thread (a static worker); two are two processes stepping at once.
    inline = InlineDriver(scheduler(translator))
    processes = (
        ProcessPartitions([scheduler(translator) for _ in range(partitions)]) if partitions > 1 else None
    )
    steps = processes or inline
    members_of = requests_of(SENTENCES)
    scheduled: dict[int, list[int]] = {}
    joined_late = 0
    try:
        for number, members in enumerate(members_of):
            joined_late += steps.state().running_rows > 0
            lead = number % 8 == 3  # every other document streams: its first sentence runs ahead
            steps.submit(
                Submission.of(number, [ids[i] for i in members], [limits[i] for i in members], beams, lead)
            )
            for key, out in steps.run(lambda _: True, seconds=60.0):  # one step per arrival
                scheduled[members_of[cast(int, key.request)][key.index]] = out[0]
        while processes.busy if processes else inline.scheduler.busy:
            for key, out in steps.run(lambda _: False, seconds=60.0):
                scheduled[members_of[cast(int, key.request)][key.index]] = out[0]
    finally:
        if processes:
            processes.stop()
    assert joined_late > 20, "most requests must arrive while others are mid-flight"
    differ = [i for i in range(SENTENCES) if scheduled[i] != alone[i]]
    if processes:
        assert all(processes.sent), f"requests must spread over every partition: {processes.sent}"
    setting = f"{translator.config.variant} beams={beams} partitions={partitions}"
    print(f"{setting}: joined mid-flight changes {len(differ)}")
    assert differ == [], f"beam {beams}: sentences {differ[:8]} change when joined mid-flight"


def test_a_new_single_sentence_goes_ahead_of_a_documents_remaining_sentences(
    translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 24)])
    limits = [RowLimits(12)] * len(ids)
    steps = scheduler(translator, row_budget=8)
    cohorts = record_cohorts(steps, monkeypatch)
    steps.submit(Submission.of("document", ids[:20], limits[:20], 1))
    run(steps, lambda _: True)
    assert steps.state().running_rows == 8 and steps.state().waiting_sentences == 12
    steps.submit(Submission.of("single", ids[20:21], limits[20:21], 1))
    finished: list[SentenceKey] = []
    while steps.busy:
        finished += [key for key, _ in run(steps, lambda _: False)]
    # Rows free up; the document and the single both have none running, so the earlier arrival
    # (the document) takes one row, then the single goes ahead of the document's other 11.
    admitted = [key for cohort in cohorts for key in cohort]
    assert SentenceKey("single", 0) in admitted[8:10], f"admitted after the first 8: {admitted[8:11]}"
    assert sorted(key.index for key in finished if key.request == "document") == list(range(20))


def test_the_row_budget_and_cohort_cap_bound_the_running_batch(translator: Translator) -> None:
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 40)])
    limits = [RowLimits(10)] * len(ids)
    steps = scheduler(translator, row_budget=16, max_cohorts=3)
    for number in range(10):
        steps.submit(Submission.of(number, ids[4 * number : 4 * number + 4], limits[:4], 4))
        run(steps, lambda _: True)
        state = steps.state()
        assert state.running_rows <= 16 and state.cohorts <= 3, state
    while steps.busy:
        run(steps, lambda _: False)
    assert steps.state().running_rows == 0


def test_a_document_never_starves_under_a_stream_of_single_sentences(translator: Translator) -> None:
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 60)])
    limits = [RowLimits(6)] * len(ids)
    steps = scheduler(translator, row_budget=12, document_rows_beside_interactive=4)
    steps.submit(Submission.of("document", ids[:20], limits[:20], 1))
    singles, document_done = 0, 0
    for _ in range(60):  # single sentences keep arriving, more than the rows can hold
        for _ in range(3):
            steps.submit(Submission.of(f"single-{singles}", [ids[20 + singles % 40]], [limits[0]], 1))
            singles += 1
        finished = run(steps, lambda _: True)
        document_done += sum(key.request == "document" for key, _ in finished)
    # The singles take every row they can, yet one document sentence always runs: at 6 steps a
    # sentence, at least 60 / 6 - 1 of them finish in 60 steps.
    assert document_done >= 9, f"the document finished only {document_done} of 20 sentences in 60 steps"


def test_a_streamed_documents_first_sentence_runs_alone_on_an_idle_scheduler(
    translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 12)])
    limits = [RowLimits(8)] * len(ids)
    steps = scheduler(translator, row_budget=32)
    cohorts = record_cohorts(steps, monkeypatch)
    steps.submit(Submission.of("streamed", ids, limits, 4, lead=1))
    run(steps, lambda _: True)
    state = steps.state()  # the other 11 wait for the lead, not for rows: no backlog
    assert (state.running_rows, state.waiting_sentences, state.backlog) == (4, 11, 0), state
    finished: list[SentenceKey] = []
    while steps.busy:
        finished += [key for key, _ in run(steps, lambda _: False)]
    # The first sentence decodes alone, 8 steps; then the other 11 fill 8 of the 32 rows at a time.
    assert cohorts[0] == [SentenceKey("streamed", 0)] and finished[0] == SentenceKey("streamed", 0)
    assert [len(cohort) for cohort in cohorts[1:]] == [8, 3]
    assert sorted(key.index for key in finished) == list(range(12))
    steps.submit(Submission.of("unstreamed", ids, limits, 4))
    run(steps, lambda _: True)
    assert len(cohorts[3]) == 8, "without a lead the first cohort fills the row budget"
    state = steps.state()
    assert (state.waiting_sentences, state.backlog) == (4, 0), "a document's waiting rows are no backlog"
    steps.submit(Submission.of("single", ids[:1], limits[:1], 4))
    assert steps.state().backlog == 1, "a one-sentence request waiting for rows is"


def test_documents_hold_few_rows_beside_interactive_work_and_still_progress(
    translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one-sentence requests run or wait, documents grow to document_rows_beside_interactive
    rows at most; a document always runs at least one sentence, so it finishes all the same."""
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 60)])
    limits = [RowLimits(6)] * len(ids)
    steps = scheduler(translator, row_budget=16, document_rows_beside_interactive=4)
    cohorts = record_cohorts(steps, monkeypatch)
    steps.submit(Submission.of("document", ids[:30], limits[:30], 1))
    run(steps, lambda _: True)
    assert steps.state().running_rows == 16, "alone, a document takes every free row"
    finished: list[SentenceKey] = []
    for number in range(30):  # a stream of single sentences that never leaves the scheduler idle
        steps.submit(Submission.of(f"single-{number}", [ids[30 + number]], [limits[0]], 1))
        finished += [key for key, _ in run(steps, lambda _: True)]
    later = [[key for key in cohort if key.request == "document"] for cohort in cohorts[1:]]
    assert any(later), "a document must keep running beside interactive work"
    assert max(len(document) for document in later) <= 4, later
    while steps.busy:
        finished += [key for key, _ in run(steps, lambda _: False)]
    assert sorted(key.index for key in finished if key.request == "document") == list(range(30))


@pytest.mark.parametrize(("window", "document_rows"), [(60.0, 4), (0.0, 20)])
def test_documents_stay_within_the_bound_for_a_while_after_interactive_work(
    translator: Translator, window: float, document_rows: int
) -> None:
    """Within interactive_window of a one-sentence request, a document that arrives keeps to the
    bound, so that the next interactive sentence finds rows free; after it, it takes every row."""
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 21)])
    limits = [RowLimits(4)] * len(ids)
    steps = scheduler(
        translator, row_budget=32, document_rows_beside_interactive=4, interactive_window=window
    )
    steps.submit(Submission.of("single", ids[:1], limits[:1], 1))
    while steps.busy:
        run(steps, lambda _: False)
    steps.submit(Submission.of("document", ids[1:], limits[1:], 1))
    run(steps, lambda _: True)
    assert steps.state().running_rows == document_rows


FORKED_WITH_THREADS = """
import os, sys
from pathlib import Path
from handlers.calls import StepCalls
from handlers.handler_config import HandlerConfig
from handlers.model.search import RowLimits
from handlers.scheduling.partition_processes import ProcessPartitions
from handlers.scheduling.run import load_and_warm_up, scheduler_for
from handlers.scheduling.step_scheduler import Submission

config = HandlerConfig(variant="int8", threads=2, torchserve_batching="continuous")
translator = load_and_warm_up(Path(sys.argv[1]), config, StepCalls.loading_threads)
processes = ProcessPartitions([scheduler_for(translator, config)], threads=config.threads)
ids = translator.encode(["那个穿棕色大衣的女人是谁？" * 8])
processes.submit(Submission.of("long", ids, [RowLimits(48)], 4))
finished = processes.run(lambda found: bool(found), seconds=30.0)
print("finished", [key.request for key, _ in finished], flush=True)
print("threads", len(os.listdir(f"/proc/{processes.pids[0]}/task")), flush=True)
processes.stop()
"""


def test_a_partition_runs_its_threads_when_forked_from_a_worker_loaded_as_the_handler_loads(
    tiny_model_dir: Path,
) -> None:
    """GNU OpenMP's pool does not survive fork: a partition forked from a worker that had run
    2-thread work waited forever in its first step. The handler loads a continuous worker with
    StepCalls.loading_threads and each partition sets its own threads. In a fresh interpreter, as a
    worker is: this one has run parallel work already."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_WITH_THREADS, str(tiny_model_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert "finished ['long']" in lines, f"the partition never finished its step: {done.stdout}"
    # The partition's main thread and the second intra-op thread its steps started.
    assert int(lines[-1].split()[1]) >= 2, lines
