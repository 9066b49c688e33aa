"""Fixtures for the front door's tests: stub replicas that misbehave on purpose, and front doors.

Imported by tests/e2e/test_fleet.py (pytest finds conftest.py only; this name keeps it beside it).
A stub stands in for a replica where the point is nginx's behaviour (refused, hanging, 500, 503),
so those tests take milliseconds; the real tiny replicas are in test_fleet.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths
from serving.ports import free_port
from serving.replica_set import Fleet


@dataclass
class Stub:
    """A replica stand-in on a free loopback port answering every POST with `status` (or hanging)."""

    status: int = 200
    hang_seconds: float = 0.0
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    seen_requests: list[tuple[str, bytes]] = field(default_factory=list)  # (path with query, body)

    def __post_init__(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                received = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stub.seen_headers.append(dict(self.headers))
                stub.seen_requests.append((self.path, received))
                if stub.hang_seconds:
                    time.sleep(stub.hang_seconds)
                body = json.dumps({"code": stub.status, "type": "Stub", "message": f"stub {stub.status}"})
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def one_replica_fleet(run_dir: Path, store: Path, door: FrontDoorConfig) -> Iterator[Fleet]:
    """A fleet of one replica of the int8 archive behind its front door, stopped on exit."""
    running = Fleet.create(run_dir, store, door=door)
    running.start(1)
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def front_door(run_dir: Path, ports: list[int], **config: int) -> Iterator[tuple[FrontDoor, str]]:
    """A started front door over `ports` with one client key; yields it and the key."""
    door = FrontDoor(FrontDoorPaths(run_dir), FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", **config))
    door.configure(ports)
    key = KeyStore(door.paths.keys).add("stub-client")
    door.start()
    try:
        yield door, key
    finally:
        door.stop()
