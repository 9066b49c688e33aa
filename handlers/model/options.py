"""What a request may ask of the decoder; torch-free, so the wire edge can build it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GenerationOptions:
    """Per-request overrides; None means the handler's default."""

    num_beams: int | None = None
    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    # How many next-best translations to return beside the best (beam search only; 0: none).
    # They are read from the hypotheses the search finishes anyway: they never change the best.
    alternatives: int = 0
