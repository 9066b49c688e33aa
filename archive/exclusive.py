"""One builder at a time for a cache directory, across processes (`make test` runs two at once)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold an advisory lock on `directory` itself (created if missing): no lock file is left in it."""
    directory.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # released on close, also if the process dies
        yield
    finally:
        os.close(descriptor)
