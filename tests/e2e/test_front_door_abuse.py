"""The front door under abuse (issue 24): inputs built to make njs's parsing slow, a flood from one
address, slow clients, and floods of health checks. Real nginx and njs before stub replicas (the
point is the front door; the real replica's health-check count is in test_fleet.py). Loopback only,
every loop bounded in count and time.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from serving.front_door import FrontDoor
from tests.e2e.conftest_fleet import Stub, front_door

pytestmark = [pytest.mark.e2e, pytest.mark.timed]  # wall-clock bounds: run alone

BUDGET_S = 1.0  # per adversarial request; the linear-time code takes milliseconds
N = 120_000  # characters: each body stays under the 128 KiB limit
PROBE = b'{"text": "\xe4\xbd\xa0\xe5\xa5\xbd"'  # how /healthz's probe body begins


def multipart(boundary: str, body: str) -> dict[str, Any]:
    return {"data": body.encode(), "headers": {"Content-Type": f"multipart/form-data; boundary={boundary}"}}


def form(body: str) -> dict[str, Any]:
    return {"data": body.encode(), "headers": {"Content-Type": "application/x-www-form-urlencoded"}}


def as_json(body: str) -> dict[str, Any]:
    return {"data": body.encode(), "headers": {"Content-Type": "application/json"}}


# Each: what makes a naive parser super-linear, the request, and njs's answer (200: parsed and sent
# on to the replica; 400: refused, with this in the message).
ADVERSARIAL: dict[str, tuple[dict[str, Any], int, str]] = {
    # The old `content-disposition:[^\r\n]*;\s*name="..."`, retried at each of 6,000 start positions,
    # each running to the end of the line and back to its ";": 3.5 s in njs (0.1 s for 1,000).
    "a part header of repeated content-disposition:": (
        multipart("b", "--b\r\n" + "content-disposition:" * 6_000 + '; name=x"\r\n\r\nx\r\n--b--\r\n'),
        400,
        "part header over 1024",
    ),
    "a part header of 1000 semicolons": (
        multipart("b", "--b\r\nContent-Disposition: form-data" + ";" * 990 + "\r\n\r\nx\r\n--b--\r\n"),
        200,
        "",
    ),
    "many semicolons and quotes in Content-Type": (
        {"data": b"x", "headers": {"Content-Type": "multipart/form-data" + '; boundary="' * 5_000}},
        200,  # the first parameter wins: a boundary of one quote, found nowhere
        "",
    ),
    "a header line per character": (
        multipart("b", "--b\r\n" + "\n" * 1000 + "\r\n\r\nx\r\n--b--\r\n"),
        400,
        "header lines",
    ),
    "bare CRs, LFs and CRLFs in a header": (
        multipart("b", '--b\r\nContent-Disposition: form-data; name="q"\r\n\n\r\r\n\r\nx\r\n--b--'),
        200,
        "",
    ),
    "20,000 parts": (multipart("b", "--b\r\n" * 20_000), 400, "over 32 parts"),
    "a long run that almost matches the boundary": (
        multipart("-" * 70, ("-" * 71 + "x") * (N // 72)),
        200,
        "",
    ),
    "line breaks of every kind, no boundary": (multipart("b", "\r\n\r\r\n\n" * (N // 6)), 200, ""),
    "ampersands": (form("&" * N), 200, ""),
    "equals signs": (form("=" * N), 200, ""),
    "percent signs": (form("%" * N), 200, ""),
    "one long field of broken escapes": (form("q=" + "%E4%" * (N // 4)), 200, ""),
    "one field, then CRLFs": (form("q=x" + "\r\n" * (N // 2)), 200, ""),
    "a JSON array nested 100,000 deep": (as_json("[" * 100_000), 400, "JSON"),
    "a JSON object of 10,000 keys": (
        as_json("{" + ",".join(f'"k{i}": 0' for i in range(10_000)) + "}"),
        200,
        "",
    ),
    "a JSON string of escapes": (as_json('{"q": "' + "\\u4f60" * (N // 6) + '"}'), 200, ""),
}


@dataclass
class Timed:
    status: int
    body: str
    seconds: float


@pytest.fixture(scope="module")
def stub() -> Iterator[Stub]:
    made = Stub(200)
    yield made
    made.close()


@pytest.fixture(scope="module")
def door_and_key(stub: Stub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FrontDoor, str]]:
    with front_door(
        tmp_path_factory.mktemp("abuse"), [stub.port], address_rate_per_second=1000, address_burst=1000
    ) as made:
        yield made


def timed_post(url: str, **kwargs: Any) -> Timed:
    began = time.monotonic()
    response = requests.post(url, timeout=30, **kwargs)
    return Timed(response.status_code, response.text, time.monotonic() - began)


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_njs_parses_adversarial_bodies_in_linear_time(door_and_key: tuple[FrontDoor, str], name: str) -> None:
    door, key = door_and_key
    request, status, message = ADVERSARIAL[name]
    headers = {**request["headers"], "Authorization": f"Bearer {key}"}
    answer = timed_post(f"{door.url}/translate", data=request["data"], headers=headers)
    assert answer.status == status and message in answer.body, answer
    assert answer.seconds < BUDGET_S, answer.seconds


def file_part(filename: str, content: str) -> dict[str, Any]:
    head = f'--b\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n\r\n'
    body = f"{head}{content}\r\n--b--\r\n"
    return multipart("b", body)


# /translate_file reads the file part too, and makes a download name of its file name.
FILE_ADVERSARIAL: dict[str, dict[str, Any]] = {
    **{
        name: request
        for name, (request, _, _) in ADVERSARIAL.items()
        if "multipart" in str(request["headers"])
    },
    "a file name of slashes, dots and spaces": file_part("/. \\" * 250 + ".txt", "x"),
    "a file of line breaks of every kind": file_part("a.txt", "\r\n\r\r\n\n" * (N // 6)),
    "a file of almost-boundaries": file_part("a.txt", "\r\n--" * (N // 4)),
}


@pytest.mark.parametrize("name", list(FILE_ADVERSARIAL))
def test_njs_reads_adversarial_files_in_linear_time(door_and_key: tuple[FrontDoor, str], name: str) -> None:
    door, key = door_and_key
    request = FILE_ADVERSARIAL[name]
    headers = {**request["headers"], "Authorization": f"Bearer {key}"}
    url = f"{door.url}/translate_file?source=zh&target=en"
    answer = timed_post(url, data=request["data"], headers=headers)
    # The stub replica answers no translation: a file that got through ends at its 502.
    assert answer.status in (400, 502) and set(json.loads(answer.body)) == {"error"}, answer
    assert answer.seconds < BUDGET_S, answer.seconds


@pytest.mark.parametrize(
    ("name", "query"),
    [
        ("ampersands", "&" * 60_000),
        ("percent signs", "q=" + "%" * 20_000),  # 60 KB as %25
        ("many repeats of one field", "q=x&" * 15_000),
    ],
)
def test_njs_parses_adversarial_query_strings_in_linear_time(
    door_and_key: tuple[FrontDoor, str], name: str, query: str
) -> None:
    door, key = door_and_key
    answer = timed_post(f"{door.url}/translate?api_key={key}&{query}")  # njs reads 1,000 fields at most
    assert answer.status == 200, answer
    assert answer.seconds < BUDGET_S, answer.seconds


def test_a_bearer_header_built_to_backtrack_is_read_in_linear_time(
    door_and_key: tuple[FrontDoor, str],
) -> None:
    """The old `^Bearer +(token{16,256}) *$` tried ` *$` after each of 240 token lengths."""
    door, _ = door_and_key
    header = "Bearer " + "a" * 255 + " " * 60_000 + "x"
    answer = timed_post(
        f"{door.url}/predictions/zh_en", json={"text": "x"}, headers={"Authorization": header}
    )
    assert answer.status == 401 and answer.seconds < BUDGET_S, answer


def test_malformed_requests_get_json_and_their_keys_stay_out_of_the_logs(
    door_and_key: tuple[FrontDoor, str],
) -> None:
    """Requests nginx refuses while reading the request line or header, which its error log would
    quote (with a query string's api_key), answered in JSON; the key is in no log."""
    door, key = door_and_key
    host, port = door.config.listen.rsplit(":", 1)
    line = f"POST /translate?api_key={key}".encode()
    cases = {
        line + b"&q=\x01 HTTP/1.1\r\nHost: a\r\n\r\n": b'"type": "BadRequest"',
        line + b" HTTP/1.1\r\nHost: a\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n": b"request header line over",
        line + b"&q=" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: a\r\n\r\n": b'"type": "URITooLong"',
        line + b" HTTP/9.9\r\nHost: a\r\n\r\n": b"",  # nginx's own 505: not ours to shape
        b"GARBAGE " + line + b"\r\n\r\n": b'"type": "BadRequest"',
    }
    for request, expected in cases.items():
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request)
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 4") or answer.startswith(b"HTTP/1.1 505"), answer[:200]
        assert expected in answer, answer[:300]
    time.sleep(0.2)
    for path in door.paths.logs.iterdir():
        assert key.encode() not in path.read_bytes(), path


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


def test_the_stream_check_takes_a_moment_whatever_the_body(tmp_path: Path) -> None:
    """front_door.answer parses a body only when it names "stream": 60,000 nested arrays, or the
    word 12,000 times, are answered at once, and the worker lives on to answer the next request."""
    bodies = [
        '{"stream": true, "text": ' + "[" * 60_000 + "]" * 60_000 + "}",
        '{"text": "x", "pad": "' + '\\"stream\\"' * 12_000 + '"}',
        '{"stream": true, "text": "x"}',
        '{"text": "x"}',
    ]
    stub = Stub(200)
    try:
        with front_door(tmp_path, [stub.port]) as (door, key):
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
            for body in bodies:
                answer = timed_post(f"{door.url}/predictions/zh_en", data=body, headers=headers)
                assert answer.status == 200 and answer.seconds < BUDGET_S, (body[:40], answer.seconds)
    finally:
        stub.close()
