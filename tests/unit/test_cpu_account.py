"""bench.cpu_account: a load run's CPU by kind of process, per request, and the batch report's use of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.cpu_account import LOAD_GENERATOR, REST_OF_HOST, Snapshot, account, host_busy_seconds

# Burns `seconds` of its own CPU time, then waits for stdin to close: a process of known CPU cost.
BURN = (
    "import sys, time\n"
    "while time.process_time() < float(sys.argv[1]):\n"
    "    pass\n"
    "print('done', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_each_role_is_charged_its_processes_time_between_the_snapshots() -> None:
    before = Snapshot({"engine": {1: 10.0, 2: 5.0}, "frontend": {3: 1.0}}, children=2.0, host=100.0, wall=0.0)
    after = Snapshot(
        # pid 2 ended during the run; pid 4 started during it and counts whole
        {"engine": {1: 14.0, 4: 1.0}, "frontend": {3: 1.5}},
        children=3.0,
        host=110.0,
        wall=5.0,
    )
    figures = account(before, after, requests=50, cores=2)
    assert figures["cpu_seconds"] == {"engine": 5.0, "frontend": 0.5, LOAD_GENERATOR: 1.0, REST_OF_HOST: 3.5}
    assert figures["ms_per_request"]["engine"] == 100.0
    assert figures["host_ms_per_request"] == 200.0
    assert figures["host_busy_share"] == 1.0
    assert figures["ended_during_run"] == 1


def test_without_proc_stat_the_host_is_left_out() -> None:
    bare = Snapshot({}, children=0.0, host=None, wall=0.0)
    figures = account(bare, Snapshot({}, children=0.5, host=None, wall=1.0), requests=0, cores=2)
    assert figures["cpu_seconds"] == {LOAD_GENERATOR: 0.5}
    assert figures["ms_per_request"] == {LOAD_GENERATOR: None}
    assert "host_ms_per_request" not in figures


NO_PROC_STAT = "the host's CPU time comes from Linux's /proc/stat"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason=NO_PROC_STAT)
def test_a_real_process_and_a_waited_child_are_read_where_they_ran() -> None:
    burner = subprocess.Popen(
        [sys.executable, "-c", BURN, "0.4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        before = Snapshot.take({"burner": [burner.pid]})
        assert burner.stdout is not None and burner.stdout.readline() == "done\n"
        subprocess.run([sys.executable, "-c", BURN, "0.3"], stdin=subprocess.DEVNULL, check=True)
        after = Snapshot.take({"burner": [burner.pid]})
    finally:
        burner.kill()
        burner.wait()
    seconds = account(before, after, requests=1, cores=1)["cpu_seconds"]
    # What each burned after the first snapshot: the burner up to 0.4 s and its interpreter's start
    # (less what it ran before the snapshot), the waited child its 0.3 s and its start.
    assert 0.1 < seconds["burner"] < 0.7
    assert seconds[LOAD_GENERATOR] >= 0.3
    # The host was busy with both at least (/proc/stat counts in ticks: 10 ms a core).
    assert before.host is not None and after.host is not None
    assert after.host - before.host >= seconds["burner"] + seconds[LOAD_GENERATOR] - 0.05
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
    assert "| CPU ms per sentence | the job | the server (load-int8-beam4-u100) |" in text
    assert "| partitions | | 24.0 |" in text
    assert "| whole host | 22.00 | 33.0 |" in text
    assert "the job can be 1.50x the server" in text  # 33 ms of host a request over 22 ms a sentence
    assert report.cpu_per_sentence(job, [served[1]]) == []  # a load from before the account: nothing
