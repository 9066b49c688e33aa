"""The per-request record that travels through the handler's stages.

Kept out of zh_en_handler.py because TorchServe requires the entry-point module
to define exactly one class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from handlers.protocols import NATIVE, Envelope
from handlers.request_parsing import GenerationOptions, InvalidRequest


@dataclass
class Job:
    """One request of a TorchServe batch on its way through the stages."""

    as_list: bool = False
    options: GenerationOptions = field(default_factory=GenerationOptions)
    token_ids: list[list[int]] = field(default_factory=list)
    translations: list[str] = field(default_factory=list)
    error: InvalidRequest | None = None
    # How the request came in (native, v1, v2): its answer, or its error, is wrapped to match.
    protocol: Envelope = NATIVE
