"""`make help` names every target the Makefile has, so none is found only by reading it."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from archive.tatoeba import REPO_ROOT


def targets() -> set[str]:
    """The Makefile's own targets (`name:` at a line's start; variables and files left out)."""
    text = (REPO_ROOT / "Makefile").read_text()
    return {name for name in re.findall(r"^([a-z][a-z-]*):(?!=)", text, re.M)}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_help_names_every_target() -> None:
    shown = subprocess.run(
        ["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", shown)) | set(re.findall(r"\| ([a-z][a-z-]*)", shown))
    assert len(targets()) > 20
    assert targets() - named - {"help"} == set(), "make help leaves these out"
