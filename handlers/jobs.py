"""The per-request record that travels through the handler's stages.

Kept out of zh_en_handler.py because TorchServe requires the entry-point module
to define exactly one class.
"""

from __future__ import annotations

from dataclasses import dataclass

from handlers.pipeline import BatchFull, RequestWork
from handlers.wire.parsing import InvalidRequest
from handlers.wire.protocols import NATIVE, Envelope


@dataclass
class Job:
    """One request of a TorchServe batch: its planned work, or the client error that ended it."""

    work: RequestWork | None = None
    error: InvalidRequest | None = None
    # How the request came in (native, v1, v2): its answer, or its error, is wrapped to match.
    protocol: Envelope = NATIVE


def admit_within(jobs: list[Job], max_sentences: int) -> None:
    """In arrival order, jobs whose sentences would take the batch past max_sentences get a 503.

    The first job with work is always admitted: its own limit (max_sentences_per_request) bounds it.
    """
    queued = 0
    for job in jobs:
        if job.work is None:
            continue
        sentences = len(job.work.chunks)
        if queued and queued + sentences > max_sentences:
            job.work, job.error = None, BatchFull(queued, max_sentences)
            continue
        queued += sentences
