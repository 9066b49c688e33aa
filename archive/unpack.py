"""Unpack the built archives in place, one copy of what they share: `python -m archive.unpack model_store`.

TorchServe serves a directory in the model store as it serves a .mar file of the same name
(`--models zh_en_int8.mar` and registering `zh_en_fp32.mar` work unchanged), and serves it where it
lies instead of extracting it to a temp directory at start. Both archives hold the same fp32 weights
(int8 quantizes them on load), so files with the same content become hard links to one copy: the
image (`make archives UNPACK=1`) holds the weights once, not twice packed plus once extracted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import zipfile
from pathlib import Path


def unpack(mar: Path) -> Path:
    """Replace the archive file `mar` by a directory of the same name holding its files."""
    staging = mar.with_name(f".{mar.name}.unpacking")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(mar) as archive:
        archive.extractall(staging)
    mar.unlink()
    staging.rename(mar)
    return mar


def link_duplicates(directories: list[Path]) -> int:
    """Hard-link every file whose content another file already has; the bytes no longer stored twice."""
    first_with: dict[tuple[int, str], Path] = {}
    saved = 0
    for directory in directories:
        for path in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()):
            key = (path.stat().st_size, _sha256(path))
            original = first_with.setdefault(key, path)
            if original != path and not path.samefile(original):
                path.unlink()
                os.link(original, path)
                saved += key[0]
    return saved


def unpack_store(store: Path) -> int:
    """Unpack every .mar file in `store` (directories are already unpacked); bytes saved by linking."""
    for mar in sorted(store.glob("*.mar")):
        if mar.is_file():
            unpack(mar)
    return link_duplicates(sorted(path for path in store.glob("*.mar") if path.is_dir()))


def _sha256(path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("store", type=Path, help="the model store, e.g. model_store")
    args = parser.parse_args(argv)
    saved = unpack_store(args.store)
    names = ", ".join(path.name for path in sorted(args.store.glob("*.mar")))
    print(f"unpacked {names} in {args.store}; {saved / 1e6:.0f} MB stored once instead of twice")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
