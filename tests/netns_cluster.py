"""A Ray cluster of three hosts on this machine: a head and two worker nodes, each in its own
network namespace with its own address on a private bridge.

The bridge lives in a fourth namespace, so the host's own network is never touched, and traffic
stays on 10.77.0.0/24 between the namespaces. Every node runs this checkout's venv with its own
temp directory (its sockets and logs) and the cluster's token (RAY_AUTH_MODE=token); the driver
runs inside the head's namespace, as on a head node. `stop` kills every process of every node and
deletes the namespaces.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from archive.tatoeba import REPO_ROOT
from batch.ray_reaper import reap

PREFIX = "zh44"  # namespace names: zh44-sw (the bridge), zh44-head, zh44-w1, zh44-w2
SUBNET = "10.77.0"
PORT = 6379
OBJECT_STORE_BYTES = 96 * 1024 * 1024


def missing_capability() -> str | None:
    """Why namespaces cannot be made here (None when they can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"{PREFIX}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"`ip netns add` is not allowed here (CAP_SYS_ADMIN): {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


@dataclass
class Node:
    name: str
    address: str
    temp_dir: Path
    cpus: int

    @property
    def namespace(self) -> str:
        return f"{PREFIX}-{self.name}"

    def run(self, command: Sequence[str], env: dict[str, str], timeout: float = 120) -> str:
        done = subprocess.run(
            ["ip", "netns", "exec", self.namespace, *command],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def kill(self) -> int:
        """Every process of this node, as a host that loses power: no `ray stop`."""
        return reap(str(self.temp_dir))


@dataclass
class Cluster:
    root: Path
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    nodes: list[Node] = field(default_factory=list)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def address(self) -> str:
        return f"{self.head.address}:{PORT}"

    def env(self) -> dict[str, str]:
        paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
        }

    def start(self, workers: int = 2, cpus_per_worker: int = 1) -> None:
        _bridge()
        # The head schedules no actor: the workers are the cluster's CPUs, as on a real head node.
        self.nodes = [Node("head", f"{SUBNET}.1", self.root / "head", 0)]
        self.nodes += [
            Node(f"w{n}", f"{SUBNET}.{n + 1}", self.root / f"w{n}", cpus_per_worker)
            for n in range(1, workers + 1)
        ]
        for number, node in enumerate(self.nodes):
            _host(node, number)
            node.temp_dir.mkdir(parents=True, exist_ok=True)
            joined = [f"--address={self.address}"]
            if node is self.head:
                joined = ["--head", f"--port={PORT}", "--include-dashboard=false"]
            node.run(
                [
                    ray_command(),
                    "start",
                    *joined,
                    f"--node-ip-address={node.address}",
                    f"--num-cpus={node.cpus}",
                    f"--object-store-memory={OBJECT_STORE_BYTES}",
                    f"--temp-dir={node.temp_dir}",
                    "--disable-usage-stats",
                ],
                self.env(),
            )

    def driver(self, command: Sequence[str]) -> list[str]:
        """A command run in the head's namespace (the job's driver, as on the head node)."""
        return ["ip", "netns", "exec", self.head.namespace, *command]

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        for name in ("head", *(f"w{n}" for n in range(1, 10)), "sw"):
            subprocess.run(["ip", "netns", "del", f"{PREFIX}-{name}"], capture_output=True, check=False)


def ray_command() -> str:
    return str(Path(sys.executable).with_name("ray"))


@contextlib.contextmanager
def cluster(root: Path, workers: int = 2) -> Iterator[Cluster]:
    made = Cluster(root)
    made.stop()  # leftovers of an earlier run that was killed
    try:
        made.start(workers)
        yield made
    finally:
        made.stop()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _bridge() -> None:
    switch = f"{PREFIX}-sw"
    _ip("netns", "add", switch)
    _ip("-n", switch, "link", "add", "br0", "type", "bridge")
    _ip("-n", switch, "link", "set", "br0", "up")


def _host(node: Node, number: int) -> None:
    """The node's namespace, joined to the bridge by a veth pair, with its address and loopback up."""
    switch = f"{PREFIX}-sw"
    _ip("netns", "add", node.namespace)
    outer, inner = f"{PREFIX}p{number}", "eth0"
    _ip("link", "add", outer, "type", "veth", "peer", "name", f"{PREFIX}i{number}")
    _ip("link", "set", outer, "netns", switch)
    _ip("link", "set", f"{PREFIX}i{number}", "netns", node.namespace)
    _ip("-n", node.namespace, "link", "set", f"{PREFIX}i{number}", "name", inner)
    _ip("-n", switch, "link", "set", outer, "master", "br0")
    _ip("-n", switch, "link", "set", outer, "up")
    _ip("-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", inner)
    _ip("-n", node.namespace, "link", "set", inner, "up")
    _ip("-n", node.namespace, "link", "set", "lo", "up")
