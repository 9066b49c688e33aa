"""Fail at once, naming the fix, when the interpreter `make` would build .venv from is unsupported.

Run with the host's python3 before anything is installed, so: standard library only, and syntax
that still parses on the 3.6-3.10 interpreters of the hosts it exists to turn away.
"""

from __future__ import annotations

import sys

SUPPORTED = "3.11"  # pyproject.toml's requires-python
ADVICE = """\
Install Python 3.11 with its venv module, then give make its path, e.g. `make serve PYTHON=python3.11`:
  Debian 12:          apt-get install python3.11-venv           (python3 is 3.11 there)
  Ubuntu 22.04/24.04: add-apt-repository ppa:deadsnakes/ppa && apt-get install python3.11-venv
  Amazon Linux 2023:  dnf install python3.11
  any Linux:          pip install uv && uv python install 3.11 && make serve PYTHON="$(uv python find 3.11)"
"""


def main() -> int:
    want = SUPPORTED
    have = "{}.{}".format(*sys.version_info[:2])
    if have != want:
        sys.stderr.write(
            f"make: Python {want} is required (torch 2.13.0 and TorchServe 0.12 are tested together on it); "
            f"{sys.executable} is Python {sys.version.split()[0]}.\n"
        )
        sys.stderr.write(ADVICE)
        return 1
    try:
        import ensurepip  # noqa: F401  # Debian and Ubuntu ship venv's pip bootstrap separately
    except ImportError:
        sys.stderr.write(
            f"make: {sys.executable} has no venv support (ensurepip is missing). "
            f"On Debian/Ubuntu: apt-get install python{want}-venv\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
