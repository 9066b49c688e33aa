"""An archive as the batch job reads it: the same files, manifest and handler yaml TorchServe loads.

A `.mar` is a zip that TorchServe extracts before loading; so do we, once per build of the archive,
beside it (a directory in the model store, as `archive.unpack` leaves it, is read in place). The
handler config is the archive's own, with only the guards that protect an online worker from one
request lifted (see `batch_config`): variant, decoder, threads, row budget and every per-sentence
limit stay.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from handlers.handler_config import HandlerConfig
from handlers.model.standin_marker import STANDIN_MARKER, STANDIN_NOTICE

MANIFEST = Path("MAR-INF") / "MANIFEST.json"
# A batch job's "request" is a whole file: a 60-page Markdown book is one text. These guards bound
# what one client may make an online worker do; a batch job's input is its owner's own corpus.
BATCH_LIMITS = {
    "max_sentences_per_request": 10**9,
    "max_sentences_per_batch": 10**9,
    "max_decode_tokens_per_request": 2**62,
    "max_chars_per_request": 10**9,  # a .docx's paragraphs, counted as one request's
    # The text stages' deadline still catches a pathological file, per file rather than per request.
    "text_budget_ms": 120_000,
}
# Rows per decoder step as throughput wants, not latency: twice the server's 64 on the same cores
# gave 1.1-1.25x the sentences/s in process (docs/BATCH.md). An archive that asks for more keeps it.
# Per-row int8 keeps each sentence's ids the same in any batch.
BATCH_ROWS = 128


@dataclass(frozen=True)
class ArchiveModel:
    """What an archive holds for the batch job: its model directory, identity and handler config."""

    path: Path  # as given: the .mar file or the unpacked directory
    model_dir: Path
    model: str
    version: str
    yaml_config: dict[str, Any]

    @property
    def served_config(self) -> HandlerConfig:
        """The handler section exactly as the server reads it."""
        return HandlerConfig.from_mapping(self.yaml_config.get("handler"))

    @property
    def standin(self) -> bool:
        return (self.model_dir / STANDIN_MARKER).exists()

    def identity(self, decoder: str) -> dict[str, Any]:
        """The identity the server puts in every response (model, version, variant, decoder, stand-in)."""
        identity: dict[str, Any] = {
            "model": self.model,
            "version": self.version,
            "variant": self.served_config.variant,
            "decoder": decoder,
            "standin": self.standin,
        }
        if self.standin:
            identity["notice"] = STANDIN_NOTICE
        return identity


def batch_config(served: HandlerConfig) -> HandlerConfig:
    rows = max(served.max_batch_rows, BATCH_ROWS)
    # No client waits on a job's sentence, so the server's fairness (documents held to
    # document_rows_beside_interactive while a one-sentence request is about) is off: a group of one
    # text, e.g. the only .srt line of a corpus, would otherwise hold the rest of the job to it.
    return dataclasses.replace(
        served,
        max_batch_rows=rows,
        document_rows_beside_interactive=rows,
        interactive_window_ms=0,
        **BATCH_LIMITS,  # type: ignore[arg-type]
    )


def open_archive(path: Path) -> ArchiveModel:
    """Read an archive (.mar file or unpacked directory) the way TorchServe does."""
    model_dir = path if path.is_dir() else _extracted(path)
    manifest_file = model_dir / MANIFEST
    if not manifest_file.is_file():
        raise FileNotFoundError(
            f"{path} is not a model archive: no {MANIFEST}; build it with `make archives`"
        )
    model = json.loads(manifest_file.read_text(encoding="utf-8"))["model"]
    config_file = model.get("configFile")
    yaml_config = yaml.safe_load((model_dir / config_file).read_text(encoding="utf-8")) if config_file else {}
    return ArchiveModel(path, model_dir, model["modelName"], model["modelVersion"], yaml_config or {})


def _extracted(mar: Path) -> Path:
    """The archive extracted once beside itself (a read-only store: under the temp directory), keyed
    by its size and mtime; extractions of an older build of it are removed."""
    if not mar.is_file():
        raise FileNotFoundError(f"no archive at {mar}; build it with `make archives`")
    stat = mar.stat()
    name = f".{mar.name}.extracted-{stat.st_size}-{stat.st_mtime_ns}"
    for parent in (mar.parent, Path(tempfile.gettempdir())):
        target = parent / name
        if target.is_dir():
            return target
        try:
            _extract(mar, target)
        except OSError:
            continue
        for stale in parent.glob(f".{mar.name}.extracted-*"):
            if not stale.name.startswith(target.name):  # not this build, nor its staging copies
                shutil.rmtree(stale, ignore_errors=True)
        return target
    raise OSError(f"cannot extract {mar} beside it or under {tempfile.gettempdir()}")


def _extract(mar: Path, target: Path) -> None:
    # Actors on one host (or on one shared file system) may extract at once: each into its own
    # staging directory, and the first rename wins.
    staging = target.with_name(f"{target.name}.{socket.gethostname()}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(mar) as archive:
        archive.extractall(staging)
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not target.is_dir():
            raise
