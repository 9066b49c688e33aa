"""The one record a request has in the handler, from its arrival to its last answer.

Kept out of zh_en_handler.py because TorchServe requires the entry-point module
to define exactly one class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from handlers.translation.decoding import Decoded
from handlers.wire.envelope import Envelope, ResponseBody
from handlers.wire.errors import Busy, InvalidRequest
from handlers.wire.native import Native


@dataclass
class Job(Decoded):
    """One request: how it came in and its plan (the handler), the sentences it waits for (its
    Decoded part, handlers.translation.decoding) and what the calls have sent of it
    (handlers.open_requests). Every stage reads and writes this record; one registry holds it
    (SentenceDecoding.jobs)."""

    # How the request came in (native, v1, v2): its answer, or its error, is wrapped to match.
    # The one place the envelope is kept; it is known as soon as the body is read.
    protocol: Envelope = field(default_factory=Native)
    error: InvalidRequest | None = None
    answer: ResponseBody | None = None  # given without the model (LibreTranslate's /detect)
    # Answering: the chunks given so far and the sentences streamed.
    calls: int = 0
    streamed: int = 0

    def refuse(self, error: InvalidRequest) -> None:
        self.planned, self.error = None, error

    @property
    def streaming(self) -> bool:
        return self.planned is not None and self.planned.request.stream

    def has_news(self) -> bool:
        """Something to send: a first chunk (the status), the whole answer, or a streamed line."""
        if self.answered:
            return False
        if self.calls == 0 or self.done:
            return True
        assert self.planned is not None
        return self.streaming and self.planned.ready() > self.streamed


def admit_within(jobs: list[Job], max_sentences: int) -> None:
    """In arrival order, jobs whose sentences would take the batch past max_sentences get a 503.

    The first job with sentences is always admitted: its own limit (max_sentences_per_request) bounds it.
    """
    queued = 0
    for job in jobs:
        if job.planned is None:
            continue
        sentences = job.planned.count
        if queued and queued + sentences > max_sentences:
            job.refuse(Busy(queued, max_sentences))
            continue
        queued += sentences
