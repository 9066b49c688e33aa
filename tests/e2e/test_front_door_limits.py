"""The front door's limits under abuse (issue 24): a flood from one address, forwarded addresses
behind a load balancer, slow clients, and floods of health checks. Real nginx and njs before stub
replicas (the real replica's health-check count is in test_fleet.py). Loopback only, every loop
bounded in count and time. Its parsers on adversarial inputs are test_front_door_parsers.py.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from serving.front_door import FrontDoor
from tests.e2e.conftest_fleet import Stub, Timed, front_door, timed_post

pytestmark = [pytest.mark.e2e, pytest.mark.timed]  # wall-clock bounds: run alone
pytest_plugins = ["tests.e2e.stub_replica"]  # stub: a replica that answers 200, one per module

PROBE = b'{"text": "\xe4\xbd\xa0\xe5\xa5\xbd"'  # how /healthz's probe body begins


def post_from(
    address: str, door: FrontDoor, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, str]:
    """A POST from another loopback address (127.0.0.0/8 is all loopback): its own per-address limits."""
    host, port = door.config.listen.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30, source_address=(address, 0))
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_an_address_over_its_rate_is_refused_before_njs_reads_the_body(tmp_path: Path, stub: Stub) -> None:
    """Broken JSON gets njs's 400 while the address is within its rate (1/s, bursts of 2), and the
    gate's 429 once over it: the body is never parsed. Another address is not affected."""
    broken = {"Content-Type": "application/json"}
    with front_door(tmp_path, [stub.port], address_rate_per_second=1, address_burst=2) as (door, _):
        answers = [post_from("127.0.0.1", door, "/translate", b"{", broken) for _ in range(8)]
        other = post_from("127.0.0.2", door, "/translate", b"{", broken)
    statuses = [status for status, _ in answers]
    assert statuses.count(400) <= 4 and statuses.count(429) >= 4, statuses
    parsed = next(body for status, body in answers if status == 400)
    limited = next(body for status, body in answers if status == 429)
    assert "Failed to decode JSON" in parsed
    assert "too many requests from this address (1 requests/s, bursts of 2" in limited
    assert other[0] == 400 and "Failed to decode JSON" in other[1]


def test_behind_a_load_balancer_its_forwarded_address_is_the_client(tmp_path: Path, stub: Stub) -> None:
    """With 127.0.0.2 as the balancer (real_ip_from), the per-address rate counts X-Forwarded-For's
    client; anyone else's X-Forwarded-For is ignored."""
    broken = {"Content-Type": "application/json"}
    limits = {"address_rate_per_second": 1, "address_burst": 1}
    with front_door(tmp_path, [stub.port], real_ip_from="127.0.0.2/32", **limits) as (door, _):

        def statuses(address: str, client: str) -> list[int]:
            forwarded = {**broken, "X-Forwarded-For": client}
            return [post_from(address, door, "/translate", b"{", forwarded)[0] for _ in range(4)]

        first = statuses("127.0.0.2", "198.51.100.7")
        second = statuses("127.0.0.2", "198.51.100.8")  # another client behind the same balancer
        forged = statuses("127.0.0.3", "198.51.100.9")  # not the balancer: counted as 127.0.0.3 ...
        again = statuses("127.0.0.3", "198.51.100.10")  # ... whatever it claims
        access_log = (door.paths.logs / "access.log").read_text()
    assert first.count(429) >= 2 and second.count(429) >= 2 and 400 in second, (first, second)
    assert forged.count(429) >= 2 and again == [429] * 4, (forged, again)
    assert "198.51.100.7 [" in access_log and "198.51.100.9 [" not in access_log


class SlowClients:
    """Connections from one loopback address that send their request a byte at a time."""

    def __init__(self, door: FrontDoor, address: str, count: int, head: bytes) -> None:
        host, port = door.config.listen.rsplit(":", 1)
        self.sockets = []
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=5, source_address=(address, 0))
            sock.sendall(head)
            sock.setblocking(False)
            self.sockets.append(sock)
        self.answered: dict[int, bytes] = {}  # index -> what nginx sent (b"" for a close)

    def trickle(self) -> None:
        """One more byte on every connection nginx has not answered or closed."""
        for index, sock in enumerate(self.sockets):
            if index in self.answered:
                continue
            try:
                received = sock.recv(4096)
                self.answered[index] = received  # an answer, or b"" when nginx closed it
                continue
            except BlockingIOError:
                pass
            except OSError:  # reset: nginx timed it out (reset_timedout_connection)
                self.answered[index] = b""
                continue
            try:
                sock.send(b"x")
            except BlockingIOError:
                pass
            except OSError:
                self.answered[index] = b""

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def test_slow_clients_hold_no_one_up(tmp_path: Path, stub: Stub) -> None:
    """150 clients sending headers a byte at a time and 40 sending a body a byte at a time, for 4 s:
    the header timeout (2 s here) closes the first, the per-address connection limit (16 here) turns
    most of the second away, and a normal client is answered within 2 s all along."""
    limits = {"header_timeout_s": 2, "connections_per_address": 16}
    with front_door(tmp_path, [stub.port], **limits) as (door, key):
        slow_headers = SlowClients(
            door, "127.0.0.2", 150, b"POST /translate HTTP/1.1\r\nHost: slow\r\nX-Slow: "
        )
        body_head = (
            b"POST /translate HTTP/1.1\r\nHost: slow\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 10000\r\n\r\nq="
        )
        slow_bodies = SlowClients(door, "127.0.0.3", 40, body_head)
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(0.25):
                slow_headers.trickle()
                slow_bodies.trickle()

        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        normal: list[Timed] = []
        try:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                normal.append(timed_post(f"{door.url}/translate", data={"q": "你好", "api_key": key}))
                began = time.monotonic()
                health = requests.get(f"{door.url}/healthz", timeout=30)
                normal.append(Timed(health.status_code, health.text, time.monotonic() - began))
                time.sleep(0.3)
            slow_headers.trickle()
            slow_bodies.trickle()
        finally:
            stop.set()
            feeder.join(timeout=5)
            slow_headers.close()
            slow_bodies.close()
    assert len(normal) >= 8 and all(answer.status == 200 and answer.seconds < 2 for answer in normal), normal
    # Every slow header was cut off at the header timeout, unanswered.
    assert len(slow_headers.answered) == 150 and set(slow_headers.answered.values()) == {b""}
    # Slow bodies: 16 still held, the rest refused at once with the gate's 429.
    refused = [answer for answer in slow_bodies.answered.values() if answer.startswith(b"HTTP/1.1 429")]
    assert len(refused) == 40 - 16, slow_bodies.answered
    assert all(b"too many requests from this address" in answer for answer in refused)


def probes_seen(stub: Stub) -> int:
    return sum(1 for _, body in stub.seen_requests if body.startswith(PROBE))


def test_health_checks_share_one_probe(tmp_path: Path) -> None:
    """24 health checks at once while the one probe takes 1 s: one probe reaches the replica (the
    others wait for its result); then 8 clients checking every 0.1 s for 3 s send one about every
    second, where each check used to send its own."""
    slow = Stub(200, hang_seconds=1.0)
    try:
        with front_door(tmp_path, [slow.port]) as (door, _):
            with ThreadPoolExecutor(max_workers=24) as pool:
                statuses = list(pool.map(lambda _: door.healthz(timeout=30).status_code, range(24)))
            assert statuses == [200] * 24 and probes_seen(slow) == 1
            slow.hang_seconds = 0

            def check(_: int) -> int:
                time.sleep(0.1)
                return door.healthz(timeout=30).status_code

            began, before = time.monotonic(), probes_seen(slow)
            with ThreadPoolExecutor(max_workers=8) as pool:
                statuses = list(pool.map(check, range(240)))
            seconds = time.monotonic() - began
    finally:
        slow.close()
    ran = probes_seen(slow) - before
    assert statuses == [200] * 240
    assert seconds / 2 - 1 <= ran <= seconds + 2, (ran, seconds)
