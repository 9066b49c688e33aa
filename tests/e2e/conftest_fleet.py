"""Helpers for the front door's tests: the fleet's rate limits, stub replicas that misbehave on
purpose, front doors, and a timed POST.

Imported by tests/e2e/test_fleet.py, test_libretranslate.py, test_front_door_retries.py,
test_front_door_parsers.py and test_front_door_limits.py (pytest finds conftest.py only; this name
keeps it beside it). The session's one real replica is tests/e2e/shared_fleet.py's, a stub replica
per module tests/e2e/stub_replica.py's. A stub stands in for a replica where the point is nginx's
behaviour (refused, hanging, 500, 503), so those tests take milliseconds.
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
from typing import Any

import requests

from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths
from serving.ports import free_port
from serving.replica_set import Fleet


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass


class Loopback:
    """An HTTP server on a free loopback port, each request on its own thread, until close()."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Stub:
    """A replica stand-in on a free loopback port answering every POST with `status` (or hanging).

    `cut_off`: the answer's head and its first bytes go out, then the connection closes, as when a
    replica dies under continuous batching after its 200 head left (issue 43).
    `stream_lines`: an NDJSON stream instead, one chunk per line; with `cut_off` the connection
    closes after them, and `stall_seconds` waits before the end (a replica that stopped answering)."""

    status: int = 200
    hang_seconds: float = 0.0
    cut_off: bool = False
    stream_lines: tuple[str, ...] = ()
    stall_seconds: float = 0.0
    body: dict[str, Any] | None = None  # answered instead of the default body
    seen_headers: list[dict[str, str]] = field(default_factory=list)
    seen_requests: list[tuple[str, bytes]] = field(default_factory=list)  # (path with query, body)

    def __post_init__(self) -> None:
        stub = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                received = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stub.seen_headers.append(dict(self.headers))
                stub.seen_requests.append((self.path, received))
                if stub.hang_seconds:
                    time.sleep(stub.hang_seconds)
                if stub.stream_lines:
                    self._stream()
                    return
                default = {"code": stub.status, "type": "Stub", "message": f"stub {stub.status}"}
                body = json.dumps(stub.body if stub.body is not None else default)
                if stub.cut_off:
                    self.send_response(stub.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(body) // 2, body[: len(body) // 2].encode()))
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def _stream(self) -> None:
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("X-Accel-Buffering", "no")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for line in stub.stream_lines:
                    chunk = f"{line}\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                time.sleep(stub.stall_seconds)
                if stub.cut_off:
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")

        self.loopback = Loopback(Handler)

    @property
    def port(self) -> int:
        return self.loopback.port

    def close(self) -> None:
        self.loopback.close()


# The shared fleet's front door is test_fleet.py's: a rate of 1 request/s per key makes its 429 test
# independent of how long a translation takes (a burst of 3 x BURST requests sent at once always
# exceeds BURST + 1); the other tests there send at most a few requests per key.
FLEET_RATE, FLEET_BURST = 1, 10


def replica_port(fleet: Fleet) -> int:
    """The inference port of the fleet's one replica, for another front door to send to."""
    (spec,) = fleet.state.replicas
    return spec.ports.inference


@contextmanager
def front_door(run_dir: Path, ports: list[int], **config: Any) -> Iterator[tuple[FrontDoor, str]]:
    """A started front door over `ports` with one client key; yields it and the key."""
    settings = {"listen": f"127.0.0.1:{free_port()}", **config}
    door = FrontDoor(FrontDoorPaths(run_dir), FrontDoorConfig(**settings))
    door.configure(ports)
    key = KeyStore(door.paths.keys).add("stub-client")
    door.start()
    try:
        yield door, key
    finally:
        door.stop()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_error(response: requests.Response, code: int, kind: str) -> None:
    """A JSON error from the front door: its status, and the same code and type in the body."""
    assert response.status_code == code, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["code"] == code and response.json()["type"] == kind, response.text


@dataclass
class Timed:
    """A POST's status, body and wall time."""

    status: int
    body: str
    seconds: float


def timed_post(url: str, **kwargs: Any) -> Timed:
    began = time.monotonic()
    response = requests.post(url, timeout=30, **kwargs)
    return Timed(response.status_code, response.text, time.monotonic() - began)
