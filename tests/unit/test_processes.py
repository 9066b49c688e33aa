"""/proc/<pid>/stat is parsed in one place (serving.processes), right for any command name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.processes import (
    command_line,
    live_children,
    process_alive,
    process_state,
    stat_parent,
    stat_state,
)
from tests.waiting import wait_until

linux_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc only")


@linux_proc
def test_this_process_reads_as_running_with_its_own_command_line() -> None:
    assert stat_state(Path("/proc/self/stat").read_text()) == "R"  # it is reading the file
    assert process_state(os.getpid()) == "R"
    assert process_alive(os.getpid())
    assert command_line(os.getpid()) == " ".join(sys.orig_argv) + " "  # each argument ends in NUL


@pytest.mark.parametrize(
    ("line", "state"),
    [
        ("4242 (model worker) R 1 4242 4242 0 -1 4194560 1513 0 0 0", "R"),
        ("4242 (a) b) Z 1 4242 4242 0 -1 4194560 1513 0 0 0", "Z"),
        ("4242 ((x)) (y) D) D 1 4242 4242 0 -1", "D"),
        ("4242 (x) S) T 1 4242", "T"),
    ],
)
def test_the_state_follows_the_last_parenthesis_whatever_the_command_name(line: str, state: str) -> None:
    assert line.split()[2] != state  # a plain split takes part of the name for the state
    assert stat_state(line) == state


def test_a_plain_command_name() -> None:
    assert stat_state("4242 (python3) S 1 4242 4242 0 -1 4194560 1513 0 0 0\n") == "S"
    assert stat_parent("4242 (a) 7) S 1 4242 4242 0 -1 4194560 1513 0 0 0\n") == 1


@linux_proc
def test_a_zombie_is_not_alive_and_a_reaped_process_has_no_state() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: process_state(child.pid) == "Z", 30, lambda: process_state(child.pid), 0.01)
    assert not process_alive(child.pid)  # it still answers kill(0)
    child.wait()
    assert process_state(child.pid) is None and command_line(child.pid) is None
    assert not process_alive(child.pid)


@linux_proc
def test_live_children_are_this_processs_children_until_they_are_zombies() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in live_children(os.getpid())
        assert child.pid not in live_children(1)
        child.kill()
        wait_until(lambda: process_state(child.pid) == "Z", 30, lambda: process_state(child.pid), 0.01)
        assert child.pid not in live_children(os.getpid()), "a zombie is no live child"
    finally:
        child.kill()
        child.wait()
