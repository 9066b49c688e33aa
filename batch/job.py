"""One batch job: input files -> units -> shards (resumable) -> engine -> output files.

Output files are written as soon as every shard holding one of their units is done, each with a
sidecar `<name>.batch.json` naming the model, version, variant, decoder and stand-in flag (JSONL and
Parquet rows also carry them in columns). A file that cannot be read or whose unit the pipeline
refuses (malformed SRT, a text past the text budget) fails alone; the rest of the job goes on.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from batch.archive_model import open_archive
from batch.engines import Engine
from batch.formats import (
    KIND_OF_SUFFIX,
    InputError,
    Kind,
    TableColumns,
    kind_of,
    read_units,
    text_format,
    write_output,
)
from batch.progress import Progress
from batch.shards import Shard, ShardBudget, ShardStore, cut_shards
from batch.units import JobOptions, Unit, UnitResult

JOB_DIRECTORY = ".batch"  # under OUTPUT: one directory of shards per job (its inputs and options)
MANIFEST_SUFFIX = ".batch.json"


@dataclass(frozen=True)
class InputFile:
    path: Path
    relative: Path  # where its output goes under OUTPUT
    kind: Kind


@dataclass(frozen=True)
class JobSpec:
    inputs: str  # a file, a directory or a glob
    output: Path  # a directory
    archive: Path
    options: JobOptions = field(default_factory=JobOptions)
    columns: TableColumns = field(default_factory=TableColumns)
    budget: ShardBudget = field(default_factory=ShardBudget)


@dataclass
class Summary:
    written: list[Path] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # input file -> why
    shards: int = 0
    shards_skipped: int = 0  # done by an earlier run of the same job
    sentences: int = 0
    identity: dict[str, Any] = field(default_factory=dict)  # the model that answered, as the server says


def discover(inputs: str, output: Path) -> list[InputFile]:
    """The files INPUT names, in a fixed order; inside OUTPUT nothing is an input."""
    root = Path(inputs)
    if root.is_file():
        kind = kind_of(root)
        if kind is None:
            raise InputError(f"{root}: unknown kind of file; known suffixes: {sorted(KIND_OF_SUFFIX)}")
        return [InputFile(root, Path(root.name), kind)]
    if root.is_dir():
        candidates = sorted(root.rglob("*"))
    else:
        root = Path(inputs.split("*")[0].split("?")[0].split("[")[0] or ".")
        root = root if root.is_dir() else root.parent
        candidates = sorted(Path(match) for match in glob.glob(inputs, recursive=True))
    output = output.resolve()
    files = []
    for path in candidates:
        kind = kind_of(path)
        if kind is None or not path.is_file() or path.resolve().is_relative_to(output):
            continue
        files.append(InputFile(path, path.relative_to(root), kind))
    if not files:
        raise InputError(f"no input files at {inputs!r}; known suffixes: {sorted(KIND_OF_SUFFIX)}")
    return files


def run_job(spec: JobSpec, engine: Engine, stream: IO[str] | None = None) -> Summary:
    files = discover(spec.inputs, spec.output)
    archive = open_archive(spec.archive)
    identity = archive.identity(archive.served_config.decoder)
    summary = Summary(identity=identity)
    counts: dict[int, int] = {}
    units: list[Unit] = []
    for number, source in enumerate(files):
        try:
            texts = read_units(source.path, source.kind, spec.columns)
        except InputError as error:
            summary.failed[str(source.path)] = str(error)
            continue
        counts[number] = len(texts)
        fmt = text_format(source.kind)
        units += [Unit(number, index, text, fmt) for index, text in enumerate(texts) if text is not None]
    store = ShardStore(spec.output / JOB_DIRECTORY / _job_id(spec, files, archive.version))
    shards = cut_shards(units, spec.budget)
    summary.shards = len(shards)
    results: dict[tuple[int, int], UnitResult] = {}
    waiting: dict[int, set[int]] = defaultdict(set)  # file -> its shards not done yet
    for shard in shards:
        for unit in shard.units:
            waiting[unit.file].add(shard.number)
    pending = []
    for shard in shards:
        if store.done(shard.number):
            summary.shards_skipped += 1
            results.update({(r.file, r.index): r for r in store.read(shard.number)})
            for unit in shard.units:
                waiting[unit.file].discard(shard.number)
        else:
            pending.append(shard)
    assembler = _Assembler(spec, files, counts, identity, results, summary)
    for number in counts:
        if not waiting[number]:
            assembler.write(number)
    pending_chars = sum(shard.chars for shard in pending)
    total_chars = sum(shard.chars for shard in shards)
    progress = Progress(total_chars, total_chars - pending_chars, len(pending), stream)

    def done(shard: Shard, shard_results: list[UnitResult]) -> None:
        store.write(shard.number, shard_results)
        results.update({(r.file, r.index): r for r in shard_results})
        progress.advance(shard.chars, sum(result.sentences for result in shard_results))
        for number in sorted({unit.file for unit in shard.units}):
            waiting[number].discard(shard.number)
            if not waiting[number]:
                assembler.write(number)

    try:
        # Longest units first: the cheap shards of short lines come last, so workers finish together.
        engine.run(pending[::-1], done)
    finally:
        progress.close()
    summary.sentences = sum(result.sentences for result in results.values())
    return summary


@dataclass
class _Assembler:
    spec: JobSpec
    files: list[InputFile]
    counts: dict[int, int]
    identity: dict[str, Any]
    results: dict[tuple[int, int], UnitResult]
    summary: Summary

    def write(self, number: int) -> None:
        source = self.files[number]
        found = [self.results.get((number, index)) for index in range(self.counts[number])]
        errors = [result.error for result in found if result is not None and result.error is not None]
        if errors:
            self.summary.failed[str(source.path)] = f"{source.path}: {errors[0]}"
            return
        target = self.spec.output / source.relative
        translations = [None if result is None else result.translation for result in found]
        alternatives = None
        if self.spec.options.alternatives and source.kind in ("jsonl", "parquet"):
            alternatives = [() if result is None else result.alternatives for result in found]
        try:
            write_output(
                source.path, source.kind, self.spec.columns, target, translations, alternatives, self.identity
            )
        except InputError as error:  # the file changed under the job
            self.summary.failed[str(source.path)] = str(error)
            return
        manifest = {
            "source": str(source.path),
            "format": source.kind,
            **self.identity,
            "archive": str(self.spec.archive),
            "options": asdict(self.spec.options),
            "units": sum(result is not None for result in found),
            "sentences": sum(result.sentences for result in found if result is not None),
        }
        sidecar = target.with_name(target.name + MANIFEST_SUFFIX)
        sidecar.write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        self.summary.written.append(target)


def _job_id(spec: JobSpec, files: list[InputFile], version: str) -> str:
    """Same inputs (by content), archive, options and shard budget: the same job, whose shards a rerun
    finds on disk."""
    digest = hashlib.sha256()
    stat = spec.archive.stat()
    described = {
        "archive": [str(spec.archive.resolve()), version, stat.st_size, stat.st_mtime_ns],
        "options": asdict(spec.options),
        "columns": asdict(spec.columns),
        "budget": asdict(spec.budget),
    }
    digest.update(json.dumps(described, sort_keys=True).encode())
    for source in files:
        digest.update(str(source.relative).encode() + b"\0")
        with source.path.open("rb") as stream:
            digest.update(hashlib.file_digest(stream, "sha256").digest())
    return digest.hexdigest()[:16]
