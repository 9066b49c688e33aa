"""The per-request record that travels through the handler's stages.

Kept out of zh_en_handler.py because TorchServe requires the entry-point module
to define exactly one class.
"""

from __future__ import annotations

from dataclasses import dataclass

from handlers.protocols import NATIVE, Envelope
from handlers.request_parsing import InvalidRequest
from handlers.sentence_work import RequestWork


@dataclass
class Job:
    """One request of a TorchServe batch: its planned work, or the client error that ended it."""

    work: RequestWork | None = None
    error: InvalidRequest | None = None
    # How the request came in (native, v1, v2): its answer, or its error, is wrapped to match.
    protocol: Envelope = NATIVE
