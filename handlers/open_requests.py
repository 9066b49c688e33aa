"""The requests a worker holds, and what each TorchServe call answers for them.

The handler's decoding is one path (handlers.translation.decoding over the step scheduler); what
differs between the two ways TorchServe calls a worker is only when requests arrive and how an
answer leaves:

- `torchserve_batching: static` (TorchServe batches): a call brings a batch, decodes it to its end and
  answers every request whole;
- `torchserve_batching: continuous` (TorchServe's continuousBatching): TorchServe calls the handler again and
  again while any request is open, a new request with its body and an open one with its id
  only, and every call answers every request with one chunk. The chunk's `more` flag becomes
  TorchServe's ts_stream_next: the first chunk of a request sends the HTTP status and headers
  (TorchServe 0.12 sends them only with a chunk that says more follow), and the last one
  (more=False) ends the request: so every answer takes at least two calls. A client error is one
  whole response (more=None): TorchServe closes the connection after a 4xx, which ends the
  request; until it stops sending it, it gets empty answers.
  A streamed request (`"stream": true`) gets one JSON line per sentence, in order, as soon as
  that sentence and every one before it are done, then the whole response as the last line.

Rendering is the handler's: it asks `progress` what a request is due, and renders from its sentences.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from handlers.jobs import Job
from handlers.scheduling.step_scheduler import SchedulerState
from handlers.translation.decoding import SentenceDecoding

ALL_DONE = float("inf")  # a static call steps until its batch is decoded


@dataclass(frozen=True)
class Progress:
    """What a call owes one request."""

    first: bool  # the request's first answer (it carries the status and headers)
    lines: range  # sentences to stream now, by index among the sentences the model decodes
    done: bool  # every sentence is decoded (or the request needs none): its whole answer can go


class OpenRequests:
    def __init__(self, decoding: SentenceDecoding[Job]) -> None:
        self.decoding = decoding
        self._jobs = decoding.jobs  # the one registry: closing a request is decoding.close

    @property
    def open_count(self) -> int:
        return len(self._jobs)

    def is_open(self, request: Hashable) -> bool:
        return request in self._jobs

    def job(self, request: Hashable) -> Job:
        return self._jobs[request]

    def open(self, request: Hashable, job: Job) -> None:
        self.decoding.open(request, job)

    def close_missing(self, present: set[Hashable]) -> None:
        """Requests TorchServe no longer sends (the client went away): stop decoding them."""
        for request in [r for r in self._jobs if r not in present]:
            self.decoding.close(request)

    def state(self) -> SchedulerState:
        return self.decoding.driver.state()

    def decode_all(self) -> None:
        """A static call: step until every open request is decoded."""
        self.decoding.collect(lambda: all(job.done for job in self._jobs.values()), ALL_DONE)

    def advance(self, seconds: float, backlog_seconds: float) -> None:
        """A continuous call: take what the driver finishes until there is news, or `seconds`.

        A call costs the worker a read of every open request's headers (TorchServe's continuous
        batching resends them all), so while sentences wait for rows a call gathers what finishes
        in `backlog_seconds` and answers it together; only a streamed line still goes out at once.
        """
        if self.state().backlog:
            self.decoding.collect(self._stream_news, backlog_seconds)
        elif not self._news():
            self.decoding.collect(self._news, seconds)

    def progress(self, request: Hashable) -> Progress | None:
        """What this call owes `request`; None once its whole answer has been given."""
        job = self._jobs[request]
        job.calls += 1
        if job.answered:
            return None
        ready = job.planned.ready() if job.planned is not None and job.streaming else job.streamed
        lines, job.streamed = range(job.streamed, ready), ready
        return Progress(job.calls == 1, lines, job.done)

    def answered(self, request: Hashable, ended: bool) -> None:
        """Its whole answer went out: forget it if that `ended` the request at TorchServe, else keep
        it (answering nothing) until TorchServe stops sending it, so that it is never taken for new."""
        self._jobs[request].answered = True
        if ended:
            self.decoding.close(request)

    def _news(self) -> bool:
        return any(job.has_news() for job in self._jobs.values())

    def _stream_news(self) -> bool:
        return any(job.streaming and job.calls and job.has_news() for job in self._jobs.values())
