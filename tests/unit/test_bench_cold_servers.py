"""Every benchmark server runs cold: the archives they pack carry `sentence_cache_entries: 0`, which
production's yaml does not, so a repeated sentence reaches the model."""

from __future__ import annotations

import zipfile
from pathlib import Path

import yaml

from archive.build import CONFIG_DIR
from bench import run_all
from bench.common import archive_with
from bench.studies.layout import Point, layout_config, read_base_config
from tests.soak import faults as soak_faults


def handler_of(store: Path, archive: str) -> dict[str, object]:
    with zipfile.ZipFile(store / archive) as mar:
        name = next(n for n in mar.namelist() if n.endswith(".yaml"))
        config: dict[str, object] = yaml.safe_load(mar.read(name))["handler"]
    return config


def test_benchmark_servers_pack_the_cache_off(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert read_base_config(CONFIG_DIR, "int8")["handler"]["sentence_cache_entries"] > 0  # production: on
    point = layout_config(read_base_config(CONFIG_DIR, "int8"), Point(2, 1, 32))
    assert point["handler"]["sentence_cache_entries"] == 0
    store, archive = archive_with("int8", tiny_model_dir, tmp_path / "latency")
    assert handler_of(store, archive)["sentence_cache_entries"] == 0
    for name in run_all.SERVERS:
        store, archive = run_all._server_archive(name, tiny_model_dir, tmp_path / name)
        handler = handler_of(store, archive)
        assert handler["sentence_cache_entries"] == 0
        assert handler["decoder"] == ("generate" if name == "int8-generate" else "fast")
    store = soak_faults.cold_store(tiny_model_dir, tmp_path / "faults")
    assert [handler_of(store, f"zh_en_{v}.mar")["sentence_cache_entries"] for v in ("fp32", "int8")] == [0, 0]
