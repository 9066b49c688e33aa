"""How the C kernels are built and chosen (handlers.model.native): one library built ahead of time
with a path per instruction set, the path picked from CPUID, a named path checked against the CPU,
torch's operators (and a warning) where the library is missing or stale; and whole decodes that
give the same ids on every path this CPU runs."""

from __future__ import annotations

import ctypes
import logging
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from handlers.handler_config import ConfigError, CpuKernels, HandlerConfig
from handlers.model import native
from tests.kernel_paths import kernel_paths

# /proc/cpuinfo's names for kernels.c's CPU_FEATURES (GCC's __builtin_cpu_supports names).
CPUINFO_NAMES = {
    "avx512vnni": "avx512_vnni",
    "avxvnni": "avx_vnni",
    "amx-tile": "amx_tile",
    "amx-int8": "amx_int8",
}


@pytest.fixture(scope="module")
def library() -> ctypes.CDLL:
    return native.open_library()


def test_the_library_is_built_ahead_of_time_with_every_path(tmp_path: Path) -> None:
    built = native.build(tmp_path / "kernels.so")
    library = native.open_library(built)  # refuses a library built from another kernels.c
    for path in native.buildable_paths():
        for function in native.SIGNATURES:
            assert hasattr(library, f"{function}_{path.name}")
    assert [p.name for p in tmp_path.iterdir()] == ["kernels.so"], "no objects or partial library left behind"
    assert native.built_from_this_source(built), "make kernels skips an up-to-date library"
    (tmp_path / "other.so").write_bytes(built.read_bytes().replace(native.source_hash().encode(), b"0" * 16))
    assert not native.built_from_this_source(tmp_path / "other.so"), "and rebuilds one from another kernels.c"
    flags = " ".join(flag for path in native.PATHS for flag in path.flags)
    assert "-march=native" not in " ".join(native.COMMON_FLAGS) + flags, "one library for every x86-64 host"


def test_the_make_step_says_what_this_host_runs(library: ctypes.CDLL) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handlers.model.native", "--check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    runnable = ", ".join(path.name for path in native.supported(library))
    assert f"this CPU runs {runnable}; auto takes " in done.stdout


def test_cpuid_agrees_with_the_kernel(library: ctypes.CDLL) -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo to compare with")
    flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split()
    expected = {name for name in native.CPU_FEATURES if CPUINFO_NAMES.get(name, name) in flags}
    assert native.cpu_features(library) == expected


def test_auto_takes_the_best_proven_path_the_cpu_runs(library: ctypes.CDLL) -> None:
    chosen = native.load("auto")
    assert chosen is not None and chosen.path.proven, "a path no host has proven is never automatic"
    runnable = [path for path in native.supported(library) if path.proven]
    assert chosen.path == runnable[-1]


@pytest.mark.parametrize("name", [path.name for path in native.PATHS])
def test_a_named_path_runs_where_the_cpu_has_it_and_is_a_clear_error_elsewhere(
    library: ctypes.CDLL, name: str
) -> None:
    missing = sorted(set(native.BY_NAME[name].needs) - native.cpu_features(library))
    if not missing:
        kernels = native.load(name)
        assert kernels is not None and kernels.name == name
        assert (kernels.int8_linear is not None) == bool(native.BY_NAME[name].needs), "named: its own matmul"
    else:
        with pytest.raises(native.KernelChoiceError, match=f"{name} needs {', '.join(missing)}"):
            native.load(name)


def test_unknown_paths_fail_in_the_config_and_in_the_loader() -> None:
    with pytest.raises(ConfigError, match="cpu_kernels must be one of"):
        HandlerConfig(cpu_kernels="avx9")  # type: ignore[arg-type]
    with pytest.raises(native.KernelChoiceError, match="cpu_kernels must be one of"):
        native.load("avx9")
    assert native.load("torch") is None
    assert set(native.CHOICES) == set(get_args(CpuKernels)), "the config admits exactly the loader's choices"


def test_fbgemm_keeps_the_matmuls_where_it_runs_a_wider_path() -> None:
    avx2, vnni = native.BY_NAME["avx2"], native.BY_NAME["avx512_vnni"]
    zen3 = frozenset({"avx2", "fma"})
    zen4 = zen3 | {"avx512f", "avx512bw", "avx512vl", "avx512vnni"}
    assert native.matmuls_are_ours(avx2, zen3, named=False)
    assert not native.matmuls_are_ours(avx2, zen4, named=False), "Zen 4: fbgemm's VNNI beat our AVX2"
    assert native.matmuls_are_ours(vnni, zen4, named=False)
    assert native.matmuls_are_ours(avx2, zen4, named=True), "a named path runs its own, to be compared"


def test_a_missing_or_stale_library_means_torchs_operators_and_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    missing = tmp_path / "absent.so"
    assert native.load("auto", missing) is None
    with pytest.raises(native.KernelChoiceError, match="not loadable"):
        native.load("generic", missing)
    monkeypatch.setattr(native, "source_hash", lambda: "another-source")
    with pytest.raises(OSError, match=r"stale .* run `make kernels`"):
        native.open_library()
    native.current.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=native.__name__):
            assert native.current() is None
        assert "stale" in caplog.text and "same results" in caplog.text
    finally:
        monkeypatch.undo()
        native.current.cache_clear()
    assert native.current() is not None


@pytest.mark.parametrize("name", kernel_paths())
def test_whole_decodes_give_the_same_ids_on_every_path(lively_model_dir: Path, name: CpuKernels) -> None:
    """The lively tiny stand-in, int8, 24 sentences in batches of 8, greedy and beam 4: the ids of
    each path this CPU runs equal torch's operators' (every layer of the tiny model fits int8_linear,
    so a named path's int8 matmul runs every layer but the output layer)."""
    try:
        assert _decode(lively_model_dir, name) == _decode(lively_model_dir, "torch")
    finally:
        native.use("auto")


def _decode(model_dir: Path, kernels: CpuKernels) -> dict[int, list[list[int]]]:
    from bench.common import sample_sentences
    from handlers.model.decoding import RowLimits
    from handlers.model.translator import Translator
    from handlers.scheduling.run import decode_ids

    translator = Translator.load(
        model_dir, HandlerConfig(variant="int8", cpu_kernels=kernels, warmup=False).model
    )
    assert translator.info.kernels == kernels
    ids = translator.encode([s.source for s in sample_sentences(translator.tokenizer, 24)])
    limits = [RowLimits(min(40, 2 * len(row) + 10)) for row in ids]
    out: dict[int, list[list[int]]] = {}
    for beams in (1, 4):
        out[beams] = []
        for start in range(0, len(ids), 8):
            ranked = decode_ids(translator, ids[start : start + 8], limits[start : start + 8], beams)
            out[beams] += [hypotheses[0] for hypotheses in ranked]
    return out
