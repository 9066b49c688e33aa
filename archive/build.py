"""Build model_store/zh_en_fp32.mar and zh_en_int8.mar from one model directory.

    python -m archive.build --model Helsinki-NLP/opus-mt-zh-en   # hub id (default), pinned commit
    python -m archive.build --model /path/to/model_dir           # local save_pretrained dir
    python -m archive.build --model synthetic --standin-size tiny  # offline stand-in

Both archives hold the same weights and handler under the model name `zh_en`;
their versions (`1.0-fp32`, `1.0-int8`) and model-config yamls differ. The
real torch-model-archiver does the packing. Unchanged inputs skip the rebuild.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from archive.model_source import DEFAULT_MODEL, DEFAULT_REVISION, ModelSourceError, resolve_model_dir
from archive.tatoeba import REPO_ROOT

MODEL_NAME = "zh_en"
RELEASE = "1.0"
VARIANTS = ("fp32", "int8")
HANDLER_DIR = REPO_ROOT / "handlers"
CONFIG_DIR = REPO_ROOT / "config"
ENTRY_POINT = "zh_en_handler.py"
KERNELS_LIBRARY = HANDLER_DIR / "model" / "libzh_en_kernels.so"  # make kernels (handlers.model.native)


@dataclass(frozen=True)
class ArchiveSpec:
    variant: str
    model_dir: Path
    out_dir: Path
    # Where zh_en_<variant>.yaml is read from; tests point it at a copy with other timeouts.
    config_dir: Path = CONFIG_DIR

    @property
    def version(self) -> str:
        return f"{RELEASE}-{self.variant}"

    @property
    def config_file(self) -> Path:
        return self.config_dir / f"{MODEL_NAME}_{self.variant}.yaml"

    @property
    def glossary_file(self) -> Path | None:
        """The deployment glossary the yaml names (handler: glossary_file), read from config_dir."""
        handler = (yaml.safe_load(self.config_file.read_text()) or {}).get("handler") or {}
        name = handler.get("glossary_file")
        return None if name is None else self.config_dir / str(name)

    @property
    def mar_path(self) -> Path:
        return self.out_dir / f"{MODEL_NAME}_{self.variant}.mar"

    @property
    def stamp_path(self) -> Path:
        return self.out_dir / f".{self.mar_path.name}.inputs"


def build_archive(spec: ArchiveSpec, model_hash: str) -> bool:
    """Pack one archive; return False when an identical one is already there."""
    inputs = json.dumps(
        {
            "model": model_hash,
            "version": spec.version,
            "code": _digest([*_handler_files(), spec.config_file, *_glossary(spec)], root=REPO_ROOT),
        },
        sort_keys=True,
    )
    if spec.mar_path.exists() and spec.stamp_path.exists() and spec.stamp_path.read_text() == inputs:
        return False
    with tempfile.TemporaryDirectory(prefix="zh_en_archive_") as tmp:
        package_root = Path(tmp) / "package"  # its content lands at the archive root: handlers/...
        for file in _handler_files():
            target = package_root / file.relative_to(REPO_ROOT)  # handlers/<sub-package>/<module>.py, .c
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, target)
        for glossary in _glossary(spec):  # at the archive root, beside the weights: model_dir / name
            shutil.copy2(glossary, package_root / glossary.name)
        export = Path(tmp) / "export"
        export.mkdir()
        _run_archiver(spec, package_root, export)
        spec.out_dir.mkdir(parents=True, exist_ok=True)
        if spec.mar_path.is_dir():  # unpacked by archive.unpack: replaced whole, never moved into
            shutil.rmtree(spec.mar_path)
        shutil.move(export / f"{MODEL_NAME}.mar", spec.mar_path)
    spec.stamp_path.write_text(inputs)
    return True


def _size(path: Path) -> int:
    """An archive's bytes: the .mar file, or the files of an unpacked one (archive.unpack)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(file.stat().st_size for file in files)


def _run_archiver(spec: ArchiveSpec, package_root: Path, export: Path) -> None:
    archiver = Path(sys.executable).with_name("torch-model-archiver")
    command = [
        str(archiver if archiver.exists() else "torch-model-archiver"),
        "--model-name",
        MODEL_NAME,
        "--version",
        spec.version,
        "--handler",
        str(HANDLER_DIR / ENTRY_POINT),
        "--extra-files",
        f"{package_root},{spec.model_dir}",
        "--config-file",
        str(spec.config_file),
        "--export-path",
        str(export),
        # The weights are already compressed as well as they will be: store, don't deflate.
        "--archive-format",
        "zip-store",
        "--force",
    ]
    # The archiver stages the files in $TMPDIR/<model name>, removing it first: two builds at once
    # (`make test` runs two processes) would empty each other's. Each gets its own, in `export`'s tree.
    staging = export.with_name("archiver-tmp")
    staging.mkdir(exist_ok=True)
    subprocess.run(command, check=True, env={**os.environ, "TMPDIR": str(staging)})


def _glossary(spec: ArchiveSpec) -> list[Path]:
    glossary = spec.glossary_file
    if glossary is not None and not glossary.is_file():
        raise FileNotFoundError(
            f"{spec.config_file.name} names glossary_file {glossary.name}, not in {spec.config_dir}"
        )
    return [] if glossary is None else [glossary]


def _handler_files() -> list[Path]:
    """The whole handlers package, sub-packages included (the handler imports them by package path),
    with the C kernels' source and the library `make kernels` built from it (handlers.model.native)."""
    files = [*HANDLER_DIR.rglob("*.py"), *HANDLER_DIR.rglob("*.c"), *HANDLER_DIR.rglob(KERNELS_LIBRARY.name)]
    return sorted(path for path in files if "__pycache__" not in path.parts)


def model_digest(model_dir: Path) -> str:
    """Content digest of a model directory: the rebuild-skipping key for its archives."""
    return _digest([path for path in model_dir.iterdir() if path.is_file()])


def _digest(files: list[Path], root: Path | None = None) -> str:
    """Names (relative to root where given, so two sub-packages' __init__.py differ) and contents."""
    digest = hashlib.sha256()
    for file in sorted(files):
        name = file.relative_to(root) if root is not None and file.is_relative_to(root) else file.name
        digest.update(str(name).encode())
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="hub id, local model directory, or 'synthetic' (default: %(default)s)",
    )
    parser.add_argument(
        "--revision",
        default=DEFAULT_REVISION,
        help="hub commit (or tag) of a hub model (default: %(default)s, archive/hub.py)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail if the hub is unreachable instead of building the offline stand-in",
    )
    parser.add_argument(
        "--standin-size",
        choices=("full", "tiny"),
        default="full",
        help="stand-in size when one is built (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "model_store", help="model store directory")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=REPO_ROOT / "build" / "models",
        help="where downloaded models and stand-ins are kept",
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of fp32,int8")
    args = parser.parse_args(argv)

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown := sorted(set(variants) - set(VARIANTS)):
        parser.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    steps = len(variants) + 1
    started = time.perf_counter()
    if not KERNELS_LIBRARY.exists():
        print(
            f"warning: {KERNELS_LIBRARY.relative_to(REPO_ROOT)} is not built (make kernels): these archives "
            "carry no C kernels, and their workers will run torch's operators instead (same results, slower)",
            file=sys.stderr,
            flush=True,
        )
    print(f"[1/{steps}] resolving model {args.model!r} ...", flush=True)
    try:
        model_dir = resolve_model_dir(
            args.model, args.work_dir, args.standin_size, args.strict, revision=args.revision
        )
    except ModelSourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    digest = model_digest(model_dir)
    print(f"      model directory {model_dir} ({time.perf_counter() - started:.1f}s)", flush=True)
    for step, variant in enumerate(variants, start=2):
        spec = ArchiveSpec(variant, model_dir, args.out)
        began = time.perf_counter()
        print(f"[{step}/{steps}] {spec.mar_path.name} (version {spec.version}) ...", flush=True)
        built = build_archive(spec, digest)
        size_mb = _size(spec.mar_path) / 1e6
        state = "built" if built else "unchanged, kept"
        print(f"      {state}: {size_mb:.0f} MB in {time.perf_counter() - began:.1f}s", flush=True)
    print(f"done in {time.perf_counter() - started:.1f}s: {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
