"""Install torch's CPU build into the running interpreter, never the CUDA build, never waiting long.

On Linux x86_64 the public index's `torch==2.13.0` is the CUDA build (several GB of nvidia-* wheels).
The Makefile asks for `torch==2.13.0+cpu`, a version only PyTorch's CPU index (or a local wheel
directory) has, so no index can satisfy it with the CUDA build. The CPU index is added only when it
answers within a few seconds: a host that cannot reach it (a mirror, a wheel directory, this build
machine) would otherwise sit through pip's retries.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import sysconfig
import urllib.error
import urllib.request


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def answers(url: str, timeout: float) -> bool:
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except (OSError, urllib.error.URLError):
        return False


def pip_command(spec: str, index: str | None) -> list[str]:
    # Bytecode afterwards, on every core (compile_command): pip compiles one file at a time.
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", spec]
    return [*command, "--extra-index-url", index] if index else command


def compile_command() -> list[str]:
    """Bytecode for what pip just installed (torch and its dependencies: the venv holds nothing else
    yet), in parallel. Where PYTHONDONTWRITEBYTECODE is set, Python never writes it on import, and
    every process would compile torch's sources again."""
    site_packages = sysconfig.get_paths()["platlib"]
    return [sys.executable, "-m", "compileall", "-q", "-j", "0", site_packages]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="e.g. torch==2.13.0+cpu")
    parser.add_argument("--index", required=True, help="PyTorch's CPU wheel index")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds the index has to answer")
    args = parser.parse_args(argv)

    wanted = args.spec.partition("==")[2]
    if installed_version("torch") == wanted:
        print(f"torch {wanted} is installed")
        return 0
    index = args.index.rstrip("/")
    reachable = answers(f"{index}/torch/", args.timeout)
    if not reachable:
        print(f"{index} did not answer in {args.timeout:g} s: {args.spec} from pip's configured sources")
    done = subprocess.run(pip_command(args.spec, index if reachable else None), check=False)
    if done.returncode == 0:
        # As pip's own compile step: a file that does not compile (written for another Python) is
        # left to fail at import, if it is ever imported, not the install.
        subprocess.run(compile_command(), stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        print(
            f"Could not install {args.spec}. Give pip a source that has it: make ... TORCH_INDEX=<a "
            "reachable mirror of the CPU index>, or a wheel directory in PIP_FIND_LINKS.",
            file=sys.stderr,
        )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
