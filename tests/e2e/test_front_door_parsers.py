"""The front door's parsers in linear time (issue 24): bodies, files, query strings and headers built
to make njs's parsing slow, malformed requests nginx refuses itself, and the stream check. Real nginx
and njs before a stub replica (the point is the front door). Loopback only, every loop bounded in
count and time. The door's limits (rates, slow clients, health probes) are test_front_door_limits.py.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serving.front_door import FrontDoor
from tests.e2e.conftest_fleet import Stub, front_door, timed_post

pytestmark = [pytest.mark.e2e, pytest.mark.timed]  # wall-clock bounds: run alone
pytest_plugins = ["tests.e2e.stub_replica"]  # stub: a replica that answers 200, one per module

BUDGET_S = 1.0  # per adversarial request; the linear-time code takes milliseconds
N = 120_000  # characters: each body stays under the 128 KiB limit


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


@pytest.fixture(scope="module")
def door_and_key(stub: Stub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FrontDoor, str]]:
    with front_door(
        tmp_path_factory.mktemp("abuse"), [stub.port], address_rate_per_second=1000, address_burst=1000
    ) as made:
        yield made


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
