"""A job's units cut into shards, and the shards already done on disk.

Units are sorted by length across the whole input (so each shard, and each decoder step, holds
texts of similar length) and cut into shards by a character budget. A shard's results are written
to one file, atomically, as soon as it finishes: a rerun of the same job skips every shard on disk,
and a killed job loses at most the shards in flight. The order is deterministic, so the same
input and options always give the same shards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from batch.units import Unit, UnitResult


@dataclass(frozen=True)
class ShardBudget:
    # Small enough that every worker gets several shards (and a killed job loses little), large
    # enough that a shard fills the decoder's running batch (max_batch_rows) many times over: the
    # batch drains at each shard's end (128 units cost 7-20% against 512: docs/BATCH.md).
    max_chars: int = 20_000
    max_units: int = 512

    def __post_init__(self) -> None:
        if self.max_chars < 1 or self.max_units < 1:
            raise ValueError("a shard holds at least one character and one unit")


@dataclass(frozen=True)
class Shard:
    number: int
    units: tuple[Unit, ...]

    @property
    def chars(self) -> int:
        return sum(len(unit.text) for unit in self.units)

    def to_json(self) -> str:
        return json.dumps([asdict(unit) for unit in self.units], ensure_ascii=False)

    @staticmethod
    def units_from_json(payload: str) -> list[Unit]:
        return [Unit(**unit) for unit in json.loads(payload)]


def cut_shards(units: Iterable[Unit], budget: ShardBudget) -> list[Shard]:
    """Units sorted by length (ties in input order), cut where a shard would pass the budget."""
    ordered = sorted(units, key=lambda unit: (len(unit.text), unit.file, unit.index))
    shards: list[Shard] = []
    current: list[Unit] = []
    chars = 0
    for unit in ordered:
        if current and (chars + len(unit.text) > budget.max_chars or len(current) >= budget.max_units):
            shards.append(Shard(len(shards), tuple(current)))
            current, chars = [], 0
        current.append(unit)
        chars += len(unit.text)
    if current:
        shards.append(Shard(len(shards), tuple(current)))
    return shards


class ShardStore:
    """One JSONL file of results per finished shard, under the job's directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, number: int) -> Path:
        return self.directory / f"shard-{number:06d}.jsonl"

    def done(self, number: int) -> bool:
        return self.path(number).is_file()

    def write(self, number: int, results: Sequence[UnitResult]) -> None:
        staging = self.directory / f".shard-{number:06d}.writing"
        text = "".join(json.dumps(asdict(result), ensure_ascii=False) + "\n" for result in results)
        staging.write_text(text, encoding="utf-8")
        staging.replace(self.path(number))  # atomic: a shard file on disk is always complete

    def read(self, number: int) -> list[UnitResult]:
        rows = self.path(number).read_text(encoding="utf-8").splitlines()
        return [_result(json.loads(row)) for row in rows]


def results_to_json(results: Sequence[UnitResult]) -> str:
    return json.dumps([asdict(result) for result in results], ensure_ascii=False)


def results_from_json(payload: str) -> list[UnitResult]:
    return [_result(raw) for raw in json.loads(payload)]


def _result(raw: dict[str, Any]) -> UnitResult:
    return UnitResult(**{**raw, "alternatives": tuple(raw["alternatives"])})
