"""archive.unpack: archives become directories of the same name, shared files one copy, idempotent."""

from __future__ import annotations

import zipfile
from pathlib import Path

from archive.unpack import unpack_store


def make_mar(path: Path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)


def test_shared_files_become_one_copy_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    weights = b"w" * 4096
    make_mar(tmp_path / "a.mar", {"MAR-INF/MANIFEST.json": b'{"v": "a"}', "model.safetensors": weights})
    make_mar(tmp_path / "b.mar", {"MAR-INF/MANIFEST.json": b'{"v": "b"}', "model.safetensors": weights})

    assert unpack_store(tmp_path) == len(weights)
    a, b = tmp_path / "a.mar", tmp_path / "b.mar"
    assert a.is_dir() and b.is_dir()
    assert (a / "model.safetensors").samefile(b / "model.safetensors")
    assert (a / "MAR-INF/MANIFEST.json").read_bytes() == b'{"v": "a"}'
    assert not (a / "MAR-INF/MANIFEST.json").samefile(b / "MAR-INF/MANIFEST.json")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.mar", "b.mar"]  # no staging left

    assert unpack_store(tmp_path) == 0
