"""bench.cpu_account: a load run's CPU by kind of process, per request, and the batch report's use of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.cpu_account import (
    LOAD_GENERATOR,
    REST_OF_HOST,
    Snapshot,
    Window,
    account,
    host_busy_seconds,
    marked_rate,
    tree_role,
)

# Burns `seconds` of its own CPU time, then waits for stdin to close: a process of known CPU cost.
BURN = (
    "import sys, time\n"
    "while time.process_time() < float(sys.argv[1]):\n"
    "    pass\n"
    "print('done', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_each_role_is_charged_its_processes_time_between_the_snapshots() -> None:
    before = Snapshot({"engine": {1: 10.0, 2: 5.0}, LOAD_GENERATOR: {3: 1.0}}, host=100.0, wall=0.0)
    # pid 2 ended in between; pid 4 started in between and counts whole
    after = Snapshot({"engine": {1: 14.0, 4: 1.0}, LOAD_GENERATOR: {3: 2.0}}, host=110.0, wall=5.0)
    figures = account(before, after, rate=10.0, cores=2)
    assert figures["cpu_seconds"] == {"engine": 5.0, LOAD_GENERATOR: 1.0, REST_OF_HOST: 4.0}
    # At 10 requests a second over 5 s: the engine's 5 s are a core, 100 ms a request.
    assert figures["ms_per_request"]["engine"] == 100.0
    assert figures["host_ms_per_request"] == 200.0
    assert figures["host_busy_share"] == 1.0
    assert figures["ended_during_window"] == 1


def test_without_proc_stat_or_requests_there_is_no_host_and_no_per_request() -> None:
    figures = account(Snapshot({"x": {1: 0.0}}), Snapshot({"x": {1: 0.5}}, wall=1.0), rate=0.0, cores=2)
    assert figures["cpu_seconds"] == {"x": 0.5}
    assert figures["ms_per_request"] == {"x": None}
    assert "host_ms_per_request" not in figures


@pytest.mark.parametrize(
    ("duration", "window"),
    [
        ("30s", Window(5.0, 24.0)),
        ("2m", Window(5.0, 114.0)),
        ("1m30s", Window(5.0, 84.0)),
        ("15s", Window(5.0, 9.0)),
    ],
)
def test_the_window_is_the_runs_middle(duration: str, window: Window) -> None:
    assert Window.of(duration) == window


@pytest.mark.parametrize("duration", ["4s", "14s", "", "soon", "30"])
def test_a_short_or_unreadable_run_has_no_window(duration: str) -> None:
    assert Window.of(duration) is None


def test_the_rate_is_read_between_locusts_first_two_marks(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.write_text("ready\n1000.0 40\n1020.0 840\n1021.0 900\n")
    assert marked_rate(marks) == 40.0
    marks.write_text("ready\n1000.0 40\n")
    assert marked_rate(marks) is None  # Locust ended before the second mark


NO_PROC_STAT = "the host's CPU time comes from Linux's /proc/stat"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason=NO_PROC_STAT)
def test_a_real_process_is_read_where_it_ran() -> None:
    burner = subprocess.Popen(
        [sys.executable, "-c", BURN, "0.4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    idle = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        roles = {"burner": [burner.pid], "idle": [idle.pid]}
        before = Snapshot.take(roles)
        assert burner.stdout is not None and burner.stdout.readline() == "done\n"
        after = Snapshot.take(roles)
    finally:
        for process in (burner, idle):
            process.kill()
            process.wait()
    seconds = account(before, after, rate=1.0, cores=1)["cpu_seconds"]
    # The burner's 0.4 s and its interpreter's start, less what it ran before the first snapshot.
    assert 0.1 < seconds["burner"] < 0.7
    assert seconds["idle"] < min(0.3, seconds["burner"])  # its start at most: it waits on stdin
    # The host was busy with the burner at least (/proc/stat counts in ticks: 10 ms a core).
    assert before.host is not None and after.host is not None
    assert after.host - before.host >= seconds["burner"] - 0.05
    assert host_busy_seconds() is not None


def test_the_batch_report_sets_the_jobs_cpu_per_sentence_beside_the_servers_per_request() -> None:
    job = {"cpu_seconds_here_and_children": 44.0, "sentences": 2000}
    cpu = {
        "host_ms_per_request": 33.0,
        "host_busy_share": 0.98,
        "ms_per_request": {
            "partitions": 24.0,
            "frontend (Java)": 2.0,
            LOAD_GENERATOR: 5.0,
            REST_OF_HOST: 2.0,
        },
    }
    served: list[dict[str, Any]] = [
        {"label": "load-int8-beam4-u100", "cpu": cpu},
        {"label": "old", "rps": 1.0},
    ]
    text = "\n".join(report.cpu_per_sentence(job, served))
    assert "the job (whole run, its model loads inside) | the server (load-int8-beam4-u100) |" in text
    assert "| partitions | | 24.0 |" in text
    assert "| whole host | 22.00 | 33.0 |" in text
    assert "the job's rate is 1.50x the server's" in text  # 33 ms of host a request over 22 ms a sentence
    assert report.cpu_per_sentence(job, [served[1]]) == []  # a load from before the account: nothing


def test_a_tree_role_holds_its_roots_and_everything_under_them() -> None:
    # A parent that starts a child and waits: the role must find the child through the parent.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', 'import sys; "
            "sys.stdin.read()'], stdin=subprocess.PIPE); print(child.pid, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        roles = tree_role("server", lambda: [parent.pid])()
        assert roles == {"server": [parent.pid, child]}
    finally:
        parent.kill()  # the child reads its stdin from the parent's pipe: it ends with it
        parent.wait()


def test_the_load_table_shows_the_hosts_cpu_a_request_and_its_largest_part() -> None:
    cpu = {"host_ms_per_request": 49.39, "ms_per_request": {"partitions": 45.06, LOAD_GENERATOR: 0.59}}
    assert report.host_cpu({"cpu": cpu}) == "49.39 (partitions 45.06)"
    assert report.host_cpu({}) == "-"  # a load from before the account, or under 15 s
