"""Our C kernels (kernels.c), built with the machine's C compiler at first use and loaded with ctypes.

The library is cached per source, flags and CPU (-march=native), so a host builds it once. Where it
cannot be built (no compiler, as in the slim image; no writable cache) the callers use torch's
operators, and a warning says so once: every kernel gives the results of the torch calls it stands
for (tests/unit/test_row_int8_kernels.py, tests/unit/test_top_k.py), so nothing else depends on it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels.c")
# -ffp-contract=off: a fused multiply-add only where the source asks for one (fmaf), as torch does.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")
POINTER, SIZE = ctypes.c_void_p, ctypes.c_int64
SIGNATURES = {
    "map_rows": ([POINTER, SIZE, SIZE, POINTER, POINTER, POINTER], None),
    "restore_rows": ([POINTER, SIZE, SIZE, POINTER, POINTER, POINTER, POINTER, POINTER], None),
    "top_k_rows": ([POINTER, SIZE, SIZE, SIZE, POINTER, POINTER, POINTER], SIZE),
    # x, rows, cols, packed, n, multiplier, row_sums, bias, inverse, q, low, span, out
    "int8_linear": (
        [POINTER, SIZE, SIZE, POINTER, SIZE, *[POINTER] * 3, ctypes.c_float, *[POINTER] * 4],
        None,
    ),
    "int8_linear_built": ([], ctypes.c_int),
}


def build(cache: Path | None = None) -> Path:
    """The compiled library for this source, flags and CPU: built once, then found in the cache."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc or gcc) on PATH")
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + _cpu().encode()).hexdigest()[:16]
    directory = cache or _cache_dir()
    library = directory / f"kernels-{key}.so"
    if library.exists():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    # Workers may build at once: each writes its own file and renames it into place.
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".so", delete=False) as partial:
        pass
    try:
        subprocess.run(
            [compiler, *FLAGS, "-o", partial.name, str(SOURCE), "-lm"],
            check=True,
            capture_output=True,
            timeout=120,
            text=True,
        )
        os.replace(partial.name, library)
    finally:
        Path(partial.name).unlink(missing_ok=True)
    return library


def open_library(path: Path) -> ctypes.CDLL:
    """The library at `path` with its functions' argument types set (ctypes lets go of the GIL in them)."""
    library = ctypes.CDLL(str(path))
    for name, (arguments, result) in SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes, function.restype = arguments, result
    return library


@functools.cache
def library() -> ctypes.CDLL | None:
    """This process's kernels, or None where they cannot be built (said once, as a warning)."""
    try:
        return open_library(build())
    except (OSError, subprocess.SubprocessError) as error:
        detail = error.stderr if isinstance(error, subprocess.CalledProcessError) else error
        logger.warning("C kernels not built (%s): torch's operators stand in, same results", detail)
        return None


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(root) / "zh_en" / "native"


def _cpu() -> str:
    """What -march=native compiled for: the CPU's model and feature flags (a cache shared across hosts)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(wanted)))
