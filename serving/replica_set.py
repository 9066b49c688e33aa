"""A replica set on one machine: N TorchServe replicas behind nginx (deploy/FLEET.md; CLI: serving.fleet).

Each replica is a whole TorchServe (frontend and workers) with its own free ports and working
directory under `<dir>/replicas/<name>`, started from config/config.replica.properties: loopback
only, token auth off, because auth lives at the front door. Its management API is a unix socket in
the replica's 0700 socket directory (`TorchServe.management_socket`), so only this user, the
supervisor's, can reach it. `<dir>/fleet.json` records what runs, so a later command
(`make fleet-stop`, `keys add`, `roll`) finds it again.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from serving.client import ServerError
from serving.files import write_atomically
from serving.front_door import FrontDoor
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths
from serving.ports import Ports
from serving.processes import process_alive, wait_gone
from serving.swap import PROBE_TEXT, resolve_target, swap
from serving.torchserve import REPO_ROOT, TorchServe

REPLICA_CONFIG = REPO_ROOT / "config" / "config.replica.properties"
DEFAULT_DIR = REPO_ROOT / "build" / "fleet"
DEFAULT_ARCHIVE = "zh_en_int8.mar"


@dataclass(frozen=True)
class ReplicaSpec:
    name: str
    ports: Ports


@dataclass(frozen=True)
class FleetState:
    model_store: Path
    archive: str
    front_door: FrontDoorConfig
    replicas: tuple[ReplicaSpec, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> FleetState:
        raw: dict[str, Any] = json.loads(text)
        return cls(
            Path(raw["model_store"]),
            raw["archive"],
            FrontDoorConfig(**raw["front_door"]),
            tuple(ReplicaSpec(r["name"], Ports(**r["ports"])) for r in raw["replicas"]),
        )


class Fleet:
    """`Fleet.create(...)` then `start(n)`; `Fleet.load(dir)` finds a running one again."""

    def __init__(self, run_dir: Path, state: FleetState) -> None:
        self.run_dir = run_dir.resolve()
        self.state = state
        self.door = FrontDoor(FrontDoorPaths(self.run_dir), state.front_door)
        self._servers: dict[str, TorchServe] = {}

    @classmethod
    def create(
        cls,
        run_dir: Path,
        model_store: Path,
        archive: str = DEFAULT_ARCHIVE,
        door: FrontDoorConfig | None = None,
    ) -> Fleet:
        return cls(run_dir, FleetState(model_store.resolve(), archive, door or FrontDoorConfig()))

    @classmethod
    def load(cls, run_dir: Path) -> Fleet:
        state_file = run_dir / "fleet.json"
        if not state_file.exists():
            raise FileNotFoundError(f"no fleet in {run_dir}: start one with `make fleet`")
        return cls(run_dir, FleetState.from_json(state_file.read_text()))

    # Replicas
    def names(self) -> list[str]:
        return [spec.name for spec in self.state.replicas]

    def server(self, name: str) -> TorchServe:
        if name not in self._servers:
            spec = next((spec for spec in self.state.replicas if spec.name == name), None)
            if spec is None:
                raise KeyError(f"no replica {name!r}; replicas: {self.names()}")
            self._servers[name] = TorchServe(
                self.state.model_store,
                self.run_dir / "replicas" / name,
                models=(self.state.archive,),
                ports=spec.ports,
                base_config=REPLICA_CONFIG,
            )
        return self._servers[name]

    def running(self) -> bool:
        alive = (self.server(name).java_pid() for name in self.names())
        return self.door.master_pid() is not None or any(pid and process_alive(pid) for pid in alive)

    # The whole fleet
    def start(self, replicas: int = 2) -> None:
        """Start `replicas` replicas side by side, then the front door in front of them."""
        if self.running():
            raise RuntimeError(f"a fleet already runs from {self.run_dir}: `make fleet-stop` first")
        self._save(replace(self.state, replicas=()))
        try:
            names = [self._new_replica() for _ in range(replicas)]
            with ThreadPoolExecutor(max_workers=replicas) as pool:
                list(pool.map(self._start_replica, names))
            self.start_door()
        except BaseException:
            self.stop()
            raise

    def start_door(self) -> None:
        """Render the front door's config for the current replicas, start nginx, wait for /healthz."""
        self.door.configure(self._ports(), self._metrics_ports())
        self.door.start()
        self.door.wait_healthy()

    def stop(self, drain_seconds: float = 30.0) -> None:
        """The front door first, gracefully (requests in flight finish, at most `drain_seconds`), then
        every replica."""
        self.door.stop(drain_seconds)
        with ThreadPoolExecutor(max_workers=max(1, len(self.names()))) as pool:
            list(pool.map(lambda name: self.server(name).stop(), self.names()))

    def reload(self, leave_out: str | None = None) -> None:
        """Re-render nginx's config from the templates, replicas (but `leave_out`) and keys; apply it."""
        self.door.configure(
            [spec.ports.inference for spec in self.state.replicas if spec.name != leave_out],
            self._metrics_ports(),  # every replica, left out or not: the status page shows whether it answers
        )
        self.door.reload()

    # One replica
    def add_replica(self) -> str:
        """Start one more replica; it joins the front door once it has translated a probe."""
        name = self._new_replica()
        try:
            self._start_replica(name)
        except BaseException:
            self.server(name).stop()
            self._save(replace(self.state, replicas=self.state.replicas[:-1]))
            raise
        self.reload()
        return name

    def remove_replica(self, name: str) -> None:
        """Take a replica out of the front door (in-flight requests finish), then stop it."""
        server = self.server(name)
        self._save(replace(self.state, replicas=tuple(s for s in self.state.replicas if s.name != name)))
        self.reload()
        drain_deadline = time.monotonic() + self.state.front_door.retry_window_s
        while self.door.draining() and time.monotonic() < drain_deadline:
            time.sleep(0.1)  # the old nginx worker exits once its requests to this replica are done
        server.stop()
        self._servers.pop(name)

    def kill_replica(self, name: str) -> list[int]:
        """SIGKILL a replica's frontend and workers at once, as a crashed host would go."""
        server = self.server(name)
        java = server.java_pid()
        pids = [pid for pid in (java, *server.worker_pids()) if pid is not None and process_alive(pid)]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        # A killed JVM takes a while to exit; until it has, `torchserve --start` finds it through
        # the pid file and refuses to start the replica again ("already running").
        wait_gone(pids, timeout=60, poll=0.05)
        return pids

    def restart_replica(self, name: str) -> None:
        """Start a stopped or killed replica on its old ports, out of the front door until it translates.

        TorchServe accepts requests before its workers have loaded; sent there, they would wait.
        """
        if len(self.names()) > 1:
            self.reload(leave_out=name)
        self._start_replica(name)
        self.reload()

    def roll(
        self, to: str, workers: int | None = None, say: Callable[[str], None] = print
    ) -> list[dict[str, Any]]:
        """Change the default model version on every replica in turn, each with serving.swap
        (`workers`: as the target archive's model config starts it, unless given)."""
        steps = []
        for name in self.names():
            server = self.server(name)
            began = time.monotonic()
            target = resolve_target(to, server.model_store)
            swap(server.client, target, workers, say=_prefixed(say, f"{name}: "))
            seconds = round(time.monotonic() - began, 1)
            steps.append({"replica": name, "to": target.version, "seconds": seconds})
            # Replicas added from now on start on the new version too.
            self._save(replace(self.state, archive=target.archive))
            self._servers.clear()
        return steps

    # Internals
    def _new_replica(self) -> str:
        numbers = {int(name[1:]) for name in self.names()}
        name = f"r{max(numbers, default=0) + 1}"
        # A stopped or killed replica restarts on its old ports: no new replica may take them.
        taken = {port for spec in self.state.replicas for port in spec.ports.all()}
        taken.add(int(self.state.front_door.listen.rsplit(":", 1)[1]))
        ports = Ports.free(taken)
        self._save(replace(self.state, replicas=(*self.state.replicas, ReplicaSpec(name, ports))))
        return name

    def _start_replica(self, name: str, timeout: float = 300.0) -> None:
        server = self.server(name)
        server.start(timeout)
        _wait_translates(server, timeout)

    def _ports(self) -> list[int]:
        return [spec.ports.inference for spec in self.state.replicas]

    def _metrics_ports(self) -> dict[str, int]:
        return {spec.name: spec.ports.metrics for spec in self.state.replicas}

    def _save(self, state: FleetState) -> None:
        self.state = state
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.run_dir / "fleet.json", state.to_json())


def _prefixed(say: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda line: say(prefix + line)


def _wait_translates(server: TorchServe, timeout: float) -> None:
    """/ping says Healthy before any worker is READY (and after they die): translate instead."""
    deadline = time.monotonic() + timeout
    while True:
        response = server.client.translate(PROBE_TEXT, num_beams=1, max_new_tokens=1)
        if response.status_code == 200:
            return
        if time.monotonic() > deadline:
            raise ServerError(f"replica {server.workdir.name} cannot translate: {response.text[:200]}")
        time.sleep(0.5)
