"""Replace a file whole: readers (nginx on reload, the next fleet command) see the old file or the
new one, never a half-written one."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Write `text` to a staged file beside `path`, then rename it over `path`.

    `mode` (e.g. 0o600 for secrets) is set on the staged file before the rename; without it the
    file gets the usual umask-based permissions.
    """
    staged = path.with_name(path.name + ".staged")
    if mode is None:
        staged.write_text(text)
    else:
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(staged, mode)  # O_CREAT's mode does not apply to a file left over from before
    staged.replace(path)
