"""Step scheduling: the sentences of every request in flight decode together, one step at a time.

A static batch runs to its end: a one-sentence request that shares it with a document waits for
the whole document, and rows go idle as sentences finish. Here a sentence joins the running
batch as soon as rows free up and leaves it the step it ends. Sentences that start together form
a cohort (handlers.model.search): they share a position, so nothing is padded and every sentence gets
the ids it gets alone (the linear layers see all rows, per-row int8 keeps rows independent).

Admission policy (`admit`, docs/SCHEDULING.md states it with its parameters): while the row
budget (sentences x beams) has room and fewer than `max_cohorts` cohorts run, take the next
sentence of the request with the fewest sentences running, earliest arrival first on ties. A
request's first sentence therefore goes ahead of the remaining sentences of documents already
running. Documents (requests of more than one sentence) take the rows interactive work leaves:
- while interactive work is about (a one-sentence request runs or waits, or one arrived within
  `interactive_window` seconds), documents hold at most `document_rows_beside_interactive` rows:
  so that a step (whose time grows with its rows) stays near what an interactive sentence's step
  costs alone, and the next one finds rows free at once instead of waiting for document
  sentences to end;
- they never starve: while documents wait and none runs, one document sentence goes first.
Greedy and each beam count run as their own lanes (rows of one lane share a search), stepped in turn.

Lead: a request may name how many of its first sentences run ahead (a streamed document's first
line). Its other sentences wait until those have finished, so the lead decodes in a batch only as
large as the other requests make it: on an idle server the first streamed line comes at one
sentence's latency, and the document as a whole is later by about that much.

One StepScheduler is one running batch, driven by one thread (handlers.scheduling.partitions:
`submit`/`cancel`, then `admit` and `step`), in the worker's own thread or in a partition process.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from handlers.model.batching import pad_batch
from handlers.model.decoding import Decoder
from handlers.model.search import Finished, RowLimits, RunningCohort


@dataclass(frozen=True)
class SentenceKey:
    """A sentence of a request: the request's key and the sentence's index in it."""

    request: Hashable
    index: int


@dataclass(frozen=True)
class Submission:
    """A request's sentences for a step scheduler: the one shape every driver takes them in, and
    what a replaced partition is given again (`only` the sentences it had not finished)."""

    request: Hashable
    ids: tuple[tuple[int, ...], ...]
    limits: tuple[RowLimits, ...]
    beams: int
    lead: int = 0  # sentences 0..lead-1 finish before the others are admitted (a stream's first line)
    keep: int = 1  # finished hypotheses answered per sentence, best first (1 + the alternatives asked)
    # Each sentence's index in its request: 0, 1, ... unless this is what is left of it.
    indices: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.limits) != len(self.ids) or (self.indices and len(self.indices) != len(self.ids)):
            raise ValueError(
                f"{len(self.ids)} sentences, {len(self.limits)} limits, {len(self.indices)} indices"
            )

    @classmethod
    def of(
        cls,
        request: Hashable,
        ids: Iterable[Sequence[int]],
        limits: Iterable[RowLimits],
        beams: int,
        lead: int = 0,
        keep: int = 1,
    ) -> Submission:
        return cls(request, tuple(tuple(row) for row in ids), tuple(limits), beams, lead, keep)

    @property
    def numbers(self) -> Sequence[int]:
        return self.indices or range(len(self.ids))

    def only(self, indices: Iterable[int]) -> Submission:
        """The same request cut to the sentences of these indices, in their order."""
        at = {number: position for position, number in enumerate(self.numbers)}
        kept = [at[index] for index in indices]
        return Submission(
            self.request,
            tuple(self.ids[i] for i in kept),
            tuple(self.limits[i] for i in kept),
            self.beams,
            self.lead,
            self.keep,
            tuple(self.numbers[i] for i in kept),
        )


@dataclass
class _Request:
    arrival: int
    beams: int
    document: bool  # more than one sentence
    lead: int  # sentences 0..lead-1 run ahead of the others
    lead_left: int  # of those, how many have not finished
    keep: int  # hypotheses answered per sentence, best first
    waiting: deque[tuple[int, list[int], RowLimits]] = field(default_factory=deque)
    running: int = 0

    @property
    def admissible(self) -> bool:
        """A sentence waits, and it is a lead sentence or the lead has finished."""
        return bool(self.waiting) and (self.lead_left == 0 or self.waiting[0][0] < self.lead)


@dataclass(frozen=True)
class SchedulerState:
    """What the scheduler holds now, for the worker's metrics."""

    waiting_sentences: int
    running_rows: int
    cohorts: int
    # One-sentence requests' sentences that only rows hold back: they run when rows free up.
    # (Documents' waiting sentences are not counted: they wait by policy, and a call that held
    # back answers for them would only delay the interactive requests it could answer.)
    backlog: int = 0


class StepScheduler:
    def __init__(
        self,
        decoder: Decoder,
        pad_id: int,
        row_budget: int,
        max_cohorts: int,
        document_rows_beside_interactive: int,
        interactive_window: float = 0.0,
    ) -> None:
        self.decoder, self.pad_id = decoder, pad_id
        self.row_budget, self.max_cohorts = row_budget, max_cohorts
        self.document_cap = document_rows_beside_interactive
        self.interactive_window = interactive_window
        self._interactive_until = 0.0  # monotonic time until which interactive work counts as about
        self._requests: dict[Hashable, _Request] = {}
        self._lanes: dict[int, list[RunningCohort]] = defaultdict(list)  # beams -> running cohorts
        self._arrivals = 0

    def submit(self, submission: Submission) -> None:
        """Queue a request's sentences (in order); `step` gives each back keyed by SentenceKey."""
        request = submission.request
        if request in self._requests:
            raise ValueError(f"request {request!r} is already in the scheduler")
        if not submission.ids:
            return
        numbers, lead = submission.numbers, submission.lead
        self._arrivals += 1
        # A request with a sentence past its first is a document, however few of them are left.
        document = len(numbers) > 1 or max(numbers) > 0
        if not document:
            self._interactive_until = time.monotonic() + self.interactive_window
        lead_left = sum(1 for index in numbers if index < lead)
        entry = _Request(self._arrivals, submission.beams, document, lead, lead_left, submission.keep)
        rows = zip(numbers, submission.ids, submission.limits, strict=True)
        entry.waiting.extend((index, list(row), limit) for index, row, limit in rows)
        self._requests[request] = entry

    def cancel(self, request: Hashable) -> None:
        """Stop admitting a request's sentences; its running ones still finish (the caller drops them)."""
        entry = self._requests.get(request)
        if entry is not None:
            entry.waiting.clear()
            if not entry.running:
                del self._requests[request]

    @property
    def busy(self) -> bool:
        return bool(self._requests)

    def state(self) -> SchedulerState:
        rows = sum(c.sentences * beams for beams, cohorts in self._lanes.items() for c in cohorts)
        return SchedulerState(
            waiting_sentences=sum(len(entry.waiting) for entry in self._requests.values()),
            backlog=sum(
                len(entry.waiting)
                for entry in self._requests.values()
                if entry.admissible and not entry.document
            ),
            running_rows=rows,
            cohorts=sum(len(cohorts) for cohorts in self._lanes.values()),
        )

    def admit(self) -> None:
        """Start a cohort per lane from waiting sentences, as the policy in the module doc says."""
        rows = self.state().running_rows
        document_rows = sum(e.running * e.beams for e in self._requests.values() if e.document)
        interactive = time.monotonic() < self._interactive_until or any(
            not e.document and (e.running or e.waiting) for e in self._requests.values()
        )
        cohorts = sum(len(lane) for lane in self._lanes.values())
        chosen: dict[int, list[tuple[SentenceKey, list[int], RowLimits]]] = defaultdict(list)
        while cohorts + len(chosen) <= self.max_cohorts:
            candidates = [
                (e.running, e.arrival, key, e.document) for key, e in self._requests.items() if e.admissible
            ]
            documents = [candidate for candidate in candidates if candidate[3]]
            if documents and document_rows == 0:
                candidates = documents  # never starved: one document sentence runs
            elif interactive and document_rows >= self.document_cap:
                candidates = [candidate for candidate in candidates if not candidate[3]]
            if not candidates:
                break
            key = min(candidates)[2]
            entry = self._requests[key]
            if rows + entry.beams > self.row_budget and rows > 0:
                break
            if entry.beams not in chosen and cohorts + len(chosen) == self.max_cohorts:
                break
            index, ids, limit = entry.waiting.popleft()
            chosen[entry.beams].append((SentenceKey(key, index), ids, limit))
            entry.running += 1
            rows += entry.beams
            document_rows += entry.beams if entry.document else 0
        for beams, sentences in chosen.items():
            input_ids, mask = pad_batch([ids for _, ids, _ in sentences], self.pad_id)
            owners = [owner for owner, _, _ in sentences]
            limits = [limit for _, _, limit in sentences]
            self._lanes[beams].append(self.decoder.start(owners, input_ids, mask, limits, beams))

    def step(self) -> list[tuple[SentenceKey, list[list[int]]]]:
        """One decoder step for every running cohort, lane by lane."""
        finished: Finished = []
        for beams in list(self._lanes):
            lane = self._lanes[beams]
            for cohort, logits in zip(lane, self.decoder.step(lane), strict=True):
                finished += cohort.advance(logits)
            lane[:] = [cohort for cohort in lane if cohort.sentences]
            if not lane:
                del self._lanes[beams]
        answered = []
        for owner, ranked in finished:
            entry = self._requests[owner.request]
            entry.running -= 1
            if owner.index < entry.lead:
                entry.lead_left -= 1
            if not entry.running and not entry.waiting:
                del self._requests[owner.request]
            answered.append((owner, ranked[: entry.keep]))
        return answered
