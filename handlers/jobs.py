"""The per-request record that travels through the handler's stages.

Kept out of zh_en_handler.py because TorchServe requires the entry-point module
to define exactly one class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from handlers.translation.plan import PlannedRequest
from handlers.wire.envelope import Envelope, ResponseBody
from handlers.wire.errors import Busy, InvalidRequest
from handlers.wire.native import Native


@dataclass
class Job:
    """One request of a TorchServe call: its planned sentences, the client error that ended it, or
    the answer it got without the model (LibreTranslate's /detect)."""

    # How the request came in (native, v1, v2): its answer, or its error, is wrapped to match.
    # The one place the envelope is kept; it is known as soon as the body is read.
    protocol: Envelope = field(default_factory=Native)
    planned: PlannedRequest | None = None
    error: InvalidRequest | None = None
    answer: ResponseBody | None = None

    def refuse(self, error: InvalidRequest) -> None:
        self.planned, self.error = None, error


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
