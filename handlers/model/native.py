"""Our C kernels (kernels.c): built ahead of time into one library, one path per instruction set,
the path chosen from CPUID when a process first needs the kernels.

`python -m handlers.model.native` (`make kernels`, which `make serve`, `make test` and the image's
build stage run) compiles kernels.c once per path, without -march=native, and links the objects
into `libzh_en_kernels.so` beside this file; archive.build packs it into both archives. Nothing
compiles in a worker. Every path's functions carry its name (map_rows_avx2, ...), give the same
bits as the torch calls they stand for and as each other (tests/unit/test_row_int8_kernels.py,
test_int8_linear.py, test_top_k.py run every path the host can), and one setting picks a path:
`cpu_kernels` in the handler yaml (handlers.handler_config), `auto` by default.

`auto` takes the best path that a host of ours has proven (PATHS' `proven`: the same bits as the
others, shown by the tests on that instruction set) and that the CPU offers. A path nobody has run
stays off unless named. Where the library is missing or stale (its source hash is not kernels.c's),
torch's operators stand in with a warning: the same results, slower.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels.c")
LIBRARY = Path(__file__).with_name("libzh_en_kernels.so")
# -ffp-contract=off: a fused multiply-add only where the source asks for one (fmaf), as torch does.
COMMON_FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-Wall", "-Wno-psabi")
# kernels.c's cpu_features() bits, in this order (GCC's __builtin_cpu_supports names).
CPU_FEATURES = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512vnni",
    "avxvnni",
    "amx-tile",
    "amx-int8",
)


@dataclass(frozen=True)
class KernelPath:
    """One instruction-set path: what the CPU must offer, how it is compiled, who proved its bits."""

    name: str
    needs: tuple[str, ...]
    flags: tuple[str, ...]
    # The host and date whose run of the kernel tests showed this path's bits equal to the others'
    # (docs/INT8.md keeps the table); "" = none yet, so `auto` never takes it.
    proven: str
    x86_only: bool = True


ZEN3 = "AMD EPYC Zen 3 (AVX2, no AVX-512), 2 vCPUs, 2026-11-28"
ZEN4 = "AMD EPYC Zen 4 (AVX-512 VNNI, no AMX), 2 vCPUs, 2026-11-29"
AVX2 = ("-mavx2", "-mfma")
AVX512_VNNI_NEEDS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni")
AVX512_VNNI = (*AVX2, "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni")
PATHS: tuple[KernelPath, ...] = (
    KernelPath("generic", (), (), proven=ZEN3, x86_only=False),
    KernelPath("avx2", ("avx2", "fma"), AVX2, proven=ZEN3),
    KernelPath("avx_vnni", ("avx2", "fma", "avxvnni"), (*AVX2, "-mavxvnni"), proven=""),
    KernelPath("avx512_vnni", AVX512_VNNI_NEEDS, AVX512_VNNI, proven=ZEN4),
    KernelPath(
        "amx",
        (*AVX512_VNNI_NEEDS, "amx-tile", "amx-int8"),
        (*AVX512_VNNI, "-mamx-tile", "-mamx-int8"),
        proven="",
    ),
)
BY_NAME = {path.name: path for path in PATHS}
# `torch`: no C kernels at all (torch's operators); `auto`: see the module's docstring.
CHOICES = ("auto", "torch", *BY_NAME)

POINTER, SIZE = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {
    "map_rows": ([POINTER, SIZE, SIZE, POINTER, POINTER, POINTER], None),
    "restore_rows": ([POINTER, SIZE, SIZE, POINTER, POINTER, POINTER, POINTER, POINTER], None),
    "top_k_rows": ([POINTER, SIZE, SIZE, SIZE, POINTER, POINTER, POINTER], SIZE),
    # x, rows, cols, packed, n, multiplier, row_sums, bias, after, inverse, q, low, span, out
    "int8_linear": (
        [POINTER, SIZE, SIZE, POINTER, SIZE, *[POINTER] * 4, ctypes.c_float, *[POINTER] * 4],
        None,
    ),
    "int8_linear_built": ([], ctypes.c_int),
    # values, rows, cols, k, banned, exp, log, top, columns, undecided
    "log_softmax_top_k_rows": ([POINTER, SIZE, SIZE, SIZE, *[POINTER] * 6], SIZE),
    "log_softmax_lanes": ([], ctypes.c_int),
    # sentences, beams, rows, row scores, row columns, ids, eos, generated, running, running scores, caps,
    # length penalty, penalty by cap, stop when full, width, finished, finished scores, is finished,
    # improvable, then the outputs: running, running scores, origins, finished, finished scores,
    # is finished, improvable, all hit
    "beam_extend": (
        [*[SIZE] * 3, *[POINTER] * 3, *[SIZE] * 2, *[POINTER] * 3, ctypes.c_double, *[SIZE] * 3]
        + [POINTER] * 12,
        SIZE,
    ),
    # q, keys transposed, values, mask, out, shape, strides, scale (handlers.model.attention)
    "attend": ([*[POINTER] * 7, ctypes.c_float], None),
    # buffer, segments, stride, length, destinations, sources, pairs, scratch (self_attention_cache)
    "move_rows": ([POINTER, *[SIZE] * 3, POINTER, POINTER, SIZE, POINTER], None),
    "prepare": ([], ctypes.c_int),  # 0 once the process may run the path (AMX asks Linux for its tiles)
}


class KernelChoiceError(ValueError):
    """A named kernel path that is unknown, not built, or not offered by this CPU."""


@dataclass(frozen=True)
class Kernels:
    """The library's functions for one path. `int8_linear` is None where the path has no int8 matmul
    or fbgemm's own matmul is the faster one on this CPU (matmuls_are_ours)."""

    path: KernelPath
    map_rows: Callable[..., Any]
    restore_rows: Callable[..., Any]
    top_k_rows: Callable[..., Any]
    int8_linear: Callable[..., Any] | None
    # log_softmax_top_k_rows and the addresses of torch's exp and log it calls (handlers.model.top_k),
    # or None where this path's vector width is not that of torch's own log_softmax on this CPU.
    log_softmax_top_k_rows: Callable[..., Any] | None = None
    vector_math: tuple[int, int] | None = None
    beam_extend: Callable[..., Any] | None = None  # BeamCohort's step (handlers.model.search)
    attend: Callable[..., Any] | None = None  # every attention call (handlers.model.attention)
    move_rows: Callable[..., Any] | None = None  # beam reorders (handlers.model.self_attention_cache)

    @property
    def name(self) -> str:
        return self.path.name


def source_hash() -> str:
    """What a library must have been built from: kernels.c and every path's flags."""
    flags = " ".join([*COMMON_FLAGS, *(f"{p.name}:{' '.join(p.flags)}" for p in PATHS)])
    return hashlib.sha256(SOURCE.read_bytes() + flags.encode()).hexdigest()[:16]


def buildable_paths(machine: str | None = None) -> list[KernelPath]:
    """The paths compiled on this architecture: all of them on x86-64, `generic` elsewhere."""
    x86 = (machine or platform.machine()) in ("x86_64", "AMD64", "i686")
    return [path for path in PATHS if x86 or not path.x86_only]


def build(out: Path = LIBRARY, compiler: str | None = None) -> Path:
    """Compile kernels.c once per path and link one library at `out` (replaced atomically)."""
    cc = compiler or shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise FileNotFoundError(
            "no C compiler (cc or gcc) on PATH: `make kernels` installs gcc where apt-get exists"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".kernels-") as scratch:
        objects = []
        for path in buildable_paths():
            obj = Path(scratch) / f"{path.name}.o"
            defines = [f"-DKERNEL_PATH={path.name}"]
            if path.name == "generic":
                defines += ["-DKERNEL_COMMON", f'-DKERNELS_SOURCE="{source_hash()}"']
            _run([cc, *COMMON_FLAGS, *path.flags, *defines, "-c", str(SOURCE), "-o", str(obj)])
            objects.append(str(obj))
        partial = Path(scratch) / out.name
        _run([cc, "-shared", "-o", str(partial), *objects, "-lm"])
        os.replace(partial, out)
    return out


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)


def open_library(path: Path = LIBRARY) -> ctypes.CDLL:
    """The library at `path` with its functions' argument types set (ctypes lets go of the GIL in them);
    refused (OSError) if it was built from another kernels.c."""
    library = ctypes.CDLL(str(path))
    library.kernels_source.restype = ctypes.c_char_p
    built_from = library.kernels_source().decode()
    if built_from != source_hash():
        raise OSError(
            f"{path} is stale (built from {built_from}, kernels.c is {source_hash()}): run `make kernels`"
        )
    library.cpu_features.restype = ctypes.c_int64
    for path_name in (p.name for p in buildable_paths()):
        for name, (arguments, result) in SIGNATURES.items():
            function = getattr(library, f"{name}_{path_name}")
            function.argtypes, function.restype = arguments, result
    return library


def cpu_features(library: ctypes.CDLL) -> frozenset[str]:
    """What this CPU and OS offer (CPUID and XGETBV, through libgcc), by CPU_FEATURES' names."""
    bits = int(library.cpu_features())
    return frozenset(name for index, name in enumerate(CPU_FEATURES) if bits >> index & 1)


def supported(library: ctypes.CDLL) -> list[KernelPath]:
    """The built paths this CPU can run, baseline first."""
    features = cpu_features(library)
    return [path for path in buildable_paths() if set(path.needs) <= features]


def matmuls_are_ours(path: KernelPath, features: frozenset[str], named: bool) -> bool:
    """Whether int8_linear or fbgemm's matmul runs the int8 layers (the same bits either way).

    Decided by measurement, one row per case (docs/INT8.md): on AMD EPYC Zen 3 (AVX2, 2026-11-27)
    int8_linear beat fbgemm at every decoder layer (handlers.model.int8_linear); on AMD EPYC Zen 4,
    whose fbgemm runs AVX-512 VNNI, our AVX2 path decoded batches of 16 at 0.84x (greedy) and 0.83x
    (beam 4) of fbgemm's (bench.hot_path, 2026-11-28), and our AVX-512 VNNI path at 1.01x and 0.99x,
    one sentence at 1.43x and 1.25x (bench.hot_path --kernels, 2026-11-29). So ours runs only where
    its path is at least what fbgemm uses: no AVX-512 VNNI on the CPU, or our AVX-512 VNNI path (AMX:
    fbgemm has none). A named path always runs its own, so that tests and benchmarks can compare any two.
    """
    if named:
        return True
    return path.name in ("avx512_vnni", "amx") or "avx512vnni" not in features


def load(choice: str = "auto", library_path: Path = LIBRARY) -> Kernels | None:
    """The kernels for `choice` (CHOICES), or None for `torch`. A named path that is unknown, not
    built or not offered by this CPU is a KernelChoiceError; so is a missing library, except for
    `auto`, which then returns None (the caller warns)."""
    if choice not in CHOICES:
        raise KernelChoiceError(f"cpu_kernels must be one of {CHOICES}, got {choice!r}")
    if choice == "torch":
        return None
    try:
        library = open_library(library_path)
    except OSError as error:
        if choice == "auto":
            return None
        raise KernelChoiceError(
            f"cpu_kernels: {choice} asked for, but the C kernels are not loadable: {error}"
        ) from error
    features, runnable = cpu_features(library), supported(library)
    if choice == "auto":
        path = [p for p in runnable if p.proven][-1]  # generic is proven and runs anywhere
    elif BY_NAME[choice] not in runnable:
        missing = sorted(set(BY_NAME[choice].needs) - features)
        raise KernelChoiceError(
            f"cpu_kernels: {choice} needs {', '.join(missing)}, which this CPU does not offer"
        )
    else:
        path = BY_NAME[choice]
    functions = {name: getattr(library, f"{name}_{path.name}") for name in SIGNATURES}
    if functions["prepare"]() != 0:
        raise KernelChoiceError(
            f"cpu_kernels: {path.name}: the kernel refused to start (Linux gave no AMX tiles?)"
        )
    ours = bool(functions["int8_linear_built"]()) and matmuls_are_ours(path, features, choice != "auto")
    math = torch_vector_math(int(functions["log_softmax_lanes"]()))
    return Kernels(
        path,
        functions["map_rows"],
        functions["restore_rows"],
        functions["top_k_rows"],
        functions["int8_linear"] if ours else None,
        functions["log_softmax_top_k_rows"] if math else None,
        math,
        functions["beam_extend"],
        functions["attend"],
        functions["move_rows"],
    )


# torch's Vectorized<float>::exp and ::log at each width (ATen's vec512_float.h and vec256_float.h):
# Sleef's functions, exported by libtorch_cpu.
SLEEF_FUNCTIONS = {16: ("Sleef_expf16_u10", "Sleef_logf16_u10"), 8: ("Sleef_expf8_u10", "Sleef_logf8_u10")}
TORCH_LANES = {"AVX512": 16, "AVX2": 8}  # torch.backends.cpu.get_cpu_capability() -> floats a vector


def torch_vector_math(lanes: int) -> tuple[int, int] | None:
    """The addresses of the exp and log torch's log_softmax calls on this CPU, if its kernel runs
    `lanes` floats a vector (ATEN_CPU_CAPABILITY included); else None: torch's log_softmax stays."""
    import torch

    if lanes == 0 or TORCH_LANES.get(torch.backends.cpu.get_cpu_capability()) != lanes:
        return None
    try:
        libtorch = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        exp, log = (
            ctypes.cast(getattr(libtorch, name), ctypes.c_void_p).value for name in SLEEF_FUNCTIONS[lanes]
        )
    except (OSError, AttributeError):
        return None
    return (exp, log) if exp and log else None


_choice = "auto"


def use(choice: str) -> Kernels | None:
    """Make `choice` this process's kernels (a worker's `cpu_kernels`); returns them. Checked at once:
    a named path this host cannot run fails the load with a KernelChoiceError."""
    global _choice
    load(choice)  # raises before anything changes
    _choice = choice
    current.cache_clear()
    from handlers.model.native_rows import default_row_ops  # the row ops made from the old choice

    default_row_ops.cache_clear()
    return current()


@functools.cache
def current() -> Kernels | None:
    """This process's kernels (`use`, else auto), or None: torch's operators, said once as a warning."""
    kernels = load(_choice)
    if kernels is None and _choice == "auto":
        reason = _why_not_loadable()
        logger.warning("C kernels not loaded (%s): torch's operators stand in, same results", reason)
    elif kernels is not None:
        logger.info("C kernels: %s", describe(kernels))
    return kernels


def describe(kernels: Kernels | None) -> str:
    """One line for logs and results: the path, who holds the int8 matmuls, what the CPU offers."""
    if kernels is None:
        return "torch (no C kernels)"
    matmuls = "int8_linear" if kernels.int8_linear is not None else "fbgemm"
    log_softmax = "ours" if kernels.log_softmax_top_k_rows is not None else "torch's"
    proven = kernels.path.proven or "not yet proven on any host"
    return f"{kernels.name} (int8 matmuls: {matmuls}; beam log-softmax: {log_softmax}; path proven: {proven})"


def name_of(kernels: Kernels | None) -> str:
    return "torch" if kernels is None else kernels.name


def _why_not_loadable() -> str:
    if not LIBRARY.exists():
        return f"{LIBRARY.name} not built: run `make kernels`"
    try:
        open_library()
    except OSError as error:
        return str(error)
    return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build the C kernels ahead of time, or say what this host runs."
    )
    parser.add_argument("--out", type=Path, default=LIBRARY)
    parser.add_argument("--check", action="store_true", help="build nothing: print the paths this host runs")
    args = parser.parse_args(argv)
    if not args.check and not built_from_this_source(args.out):
        print(f"building {args.out.name}: {', '.join(p.name for p in buildable_paths())}", flush=True)
        build(args.out)
    library = open_library(args.out)
    runnable = [p.name for p in supported(library)]
    print(f"{args.out}: this CPU runs {', '.join(runnable)}; auto takes {describe(load('auto', args.out))}")
    return 0


def built_from_this_source(path: Path) -> bool:
    """Whether the library at `path` embeds this source's hash: read from the file, not loaded, since a
    process that loaded a library keeps that copy for its path even after the file is replaced."""
    return path.exists() and f"{source_hash()}\0".encode() in path.read_bytes()


if __name__ == "__main__":
    sys.exit(main())
