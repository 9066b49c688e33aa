"""How a result was made: the command, the commit, the machine, the date, the torch and TorchServe versions.

Every result file carries one under "signature", as every sacrebleu score carries its own: a figure
without the command and the code that produced it can be neither reproduced nor compared.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from archive.tatoeba import REPO_ROOT

# Variables that choose which instructions a library runs (torch's ATen, CTranslate2, oneDNN, MKL) or
# how many threads: a run with any of them set measured another machine than the CPU's own.
INSTRUCTION_SET_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "CT2_FORCE_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
)
# Results are what the benches write, not the code that wrote them: the first result of a run must
# not make every later one "-dirty".
RESULTS_PATHSPECS = (":(exclude)bench/results", ":(exclude)bench/studies/results")


class Signature(TypedDict):
    command: str  # python -m bench.<name> <args>
    commit: str  # short hash, "-dirty" with uncommitted changes, "unknown" without git
    machine: dict[str, Any]
    date: str  # UTC, ISO 8601
    torch: str
    torchserve: str


def signature(command: str, at: dt.datetime | None = None) -> Signature:
    return {
        "command": command,
        "commit": git_commit(),
        "machine": machine(),
        "date": (at or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
        "torch": package_version("torch"),
        "torchserve": package_version("torchserve"),
    }


def command_line(name: str, argv: Sequence[str]) -> str:
    """`python -m bench.<name>` (or the module a dotted `tests.` name gives) and its arguments,
    quoted as a shell would need them."""
    module = name if name.startswith("tests.") else f"bench.{name}"
    return f"python -m {module} {shlex.join(argv)}".rstrip()


def invoked_command(argv: Sequence[str] | None = None) -> str:
    """This process's command line: `python -m bench.<name> ...` when it runs a bench module."""
    words = list(sys.argv if argv is None else argv) or ["python"]
    script = Path(words[0])
    if script.suffix == ".py" and script.parent.name == "bench":
        return command_line(script.stem, words[1:])
    return shlex.join([script.name, *words[1:]])


def git_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's short hash, with "-dirty" when the code differs from it; "unknown" without git or a clone."""
    try:
        head = _git(repo, "rev-parse", "--short", "HEAD")
        changes = _git(repo, "status", "--porcelain", "--", ".", *RESULTS_PATHSPECS)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if changes else head


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def package_version(name: str) -> str:
    """The installed distribution's version, read without importing it."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, Any]:
    """CPU model, cores and versions: every result names the machine it came from, and the variables
    of INSTRUCTION_SET_VARIABLES that were set (an AVX-512 CPU told to run AVX2, say)."""
    import torch

    cpu = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        **cpu_kernels(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "system": f"{platform.system()} {platform.release()}",
        "environment": {name: os.environ[name] for name in INSTRUCTION_SET_VARIABLES if name in os.environ},
    }


def cpu_kernels() -> dict[str, Any]:
    """The instruction sets our C kernels look for on this CPU, and the path a server here runs by
    default (handlers.model.native: auto), named beside every figure; a bench that forces another
    path says so in its own result."""
    from handlers.model import native

    try:
        library = native.open_library()
    except OSError as error:
        return {"cpu_features": [], "cpu_kernels": f"torch (no C kernels: {error})"}
    return {
        "cpu_features": sorted(native.cpu_features(library)),
        "cpu_kernels": native.describe(native.load("auto")),
    }


class UnsignedResult(ValueError):
    """A result file that does not say how it was made."""


def command_of(result: Mapping[str, Any]) -> str:
    """The command a result was made by: its signature's (a frozen study's file may carry its own
    "command" from before signatures). A result with neither cannot be reproduced: refuse it."""
    signed = result.get("signature") or {}
    command = str(signed.get("command") or result.get("command") or "").strip()
    if not command:
        raise UnsignedResult("a result without a signature: re-measure it (make bench) rather than cite it")
    return command
