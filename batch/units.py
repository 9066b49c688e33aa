"""What a batch job is made of, apart from the model: its options, its units and their results.

Plain data that crosses processes as JSON (a Ray actor's arguments, a shard on disk). A module of
its own so that the job's driver (batch.job, batch.cli), which only cuts, stores and writes them,
imports neither torch nor transformers: batch.engine's UnitTranslator, which does, runs where the
shards are translated (in this process for --engine local, in each Ray actor otherwise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from handlers.text.documents import DocumentFormat


@dataclass(frozen=True)
class JobOptions:
    """The request options of a whole job, as the API names them."""

    beams: int | None = None  # None: the archive's default (num_beams, else the model's own)
    alternatives: int = 0
    glossary: tuple[tuple[str, str], ...] = ()  # the job's own terms; they win over the archive's TSV

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> JobOptions:
        return cls(raw["beams"], raw["alternatives"], tuple((s, t) for s, t in raw["glossary"]))


@dataclass(frozen=True)
class Unit:
    file: int  # index of the input file in the job
    index: int  # index of the unit in its file
    text: str
    text_format: DocumentFormat = "text"
    # Benchmarks on the offline stand-in only: force the output to this many tokens (the reference
    # translation's length), as bench.latency does. Never set by the command line.
    forced_tokens: int | None = None


@dataclass(frozen=True)
class UnitResult:
    file: int
    index: int
    translation: str | None  # None: the unit failed (error says why)
    alternatives: tuple[str, ...] = ()
    sentences: int = 0
    error: str | None = None
