"""The batch job on a Ray cluster that really has several hosts (tests/netns_cluster.py): a head and
two worker nodes, each in its own network namespace with its own address, token authentication on.

`--address HEAD:PORT` from the head node, with an actor on each worker node; one worker node is
killed midway (every process of it, as a host that loses power). Ray Data retries the lost actor's
shard on the surviving node (here the job then finished by itself) or fails the job; either way
the command run again finds every finished shard on disk, does the rest, and the output equals an
uninterrupted run's in this process, byte for byte: no line lost, none twice.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from archive.tatoeba import REPO_ROOT, read_blocks
from tests.netns_cluster import cluster, missing_capability

MISSING = missing_capability()
pytestmark = [
    pytest.mark.soak,  # a fault drill: `make soak` (and CI), not `make test`'s 10 minutes
    pytest.mark.long(seconds=105),  # seconds: the longest start first
    pytest.mark.skipif(
        MISSING is not None, reason=f"no network namespaces for a multi-host Ray cluster: {MISSING}"
    ),
]
SOURCES = [block.source for block in read_blocks()]


def test_a_job_across_three_hosts_survives_a_lost_worker_node(tiny_store: Path, tmp_path: Path) -> None:
    archive = tiny_store / "zh_en_int8.mar"
    corpus, reference, out = tmp_path / "lines.txt", tmp_path / "reference", tmp_path / "out"
    corpus.write_text("\n".join(SOURCES[:240]) + "\n")
    translate = [sys.executable, "-m", "batch", "translate", str(corpus)]
    alone = subprocess.run(
        [*translate, str(reference), "--archive", str(archive), "--engine", "local", "--workers", "1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert alone.returncode == 0, alone.stderr

    # Ray's socket paths must stay short (108 bytes): the nodes' directories go under /tmp.
    with tempfile.TemporaryDirectory(prefix="zh44-", dir="/tmp") as root, cluster(Path(root)) as ray_cluster:
        command = ray_cluster.driver(
            [*translate, str(out), "--archive", str(archive), "--address", ray_cluster.address]
        )
        command += ["--shard-units", "6"]
        job = subprocess.Popen(
            command, cwd=REPO_ROOT, env=ray_cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        lost = ray_cluster.nodes[2]
        deadline = time.monotonic() + 240
        while len(list(out.glob(".batch/*/shard-*.jsonl"))) < 3:
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.05)
        # Both worker nodes hold an actor: the job really runs across hosts.
        for node in ray_cluster.nodes[1:]:
            assert _actors_on(node.temp_dir), f"no actor on {node.name}"
        at_kill = len(list(out.glob(".batch/*/shard-*.jsonl")))
        assert lost.kill() > 0
        first_stdout, first_stderr = job.communicate(timeout=300)
        assert at_kill < 40, "the job had finished before the node was lost"
        # Ray Data may finish the job on the surviving node, or fail it: either way the rerun
        # finds every finished shard on disk and does only the rest.
        done_before = len(list(out.glob(".batch/*/shard-*.jsonl")))
        rerun = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=ray_cluster.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert rerun.returncode == 0, (first_stderr.decode()[-2000:], rerun.stderr[-2000:])
    assert f"40 shards ({done_before} done by an earlier run)" in rerun.stdout, (first_stdout, rerun.stdout)
    assert (out / "lines.txt").read_bytes() == (reference / "lines.txt").read_bytes()


def _actors_on(temp_dir: Path) -> list[psutil.Process]:
    """The node's Ray Data actors: children of its raylet, which names the node's directory."""
    actors = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if "raylet" in cmdline and str(temp_dir) in cmdline:
            actors += [child for child in process.children() if "MapWorker" in " ".join(child.cmdline())]
    return actors
