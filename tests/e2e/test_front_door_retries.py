"""The front door's retries and whole answers, against stub replicas that misbehave: dead, busy,
versionless, hanging, cut off after their head, refusing under a 200, streams whole, cut or stalled
(issue 43). The real fleet's routes, keys and health are in test_fleet.py.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from serving.client import StreamCut, read_stream
from serving.front_door import FrontDoor
from tests.e2e.conftest_fleet import Stub, assert_error, bearer, front_door

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=20)]

# A streamed answer as the handler writes it: one line per sentence, then the whole response.
STREAM = (
    '{"sentence": 0, "translation": "One."}',
    '{"sentence": 1, "translation": "Two."}',
    '{"translation": "One. Two.", "stats": {}}',
)


def bound_port(sock: socket.socket) -> int:
    sock.bind(("127.0.0.1", 0))
    return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def stubs() -> Iterator[dict[str, Stub]]:
    made = {
        "ok": Stub(200),
        "busy": Stub(503),
        "broken": Stub(500),
        "versionless": Stub(404),
        "hanging": Stub(200, hang_seconds=2),
        "cut": Stub(200, cut_off=True),
        "stream_whole": Stub(200, stream_lines=STREAM),
        "stream_cut": Stub(200, stream_lines=STREAM[:2], cut_off=True),
        "stream_stalled": Stub(200, stream_lines=STREAM[:2], stall_seconds=3),
        "worker_died": Stub(507),
        # The same death, read before TorchServe saw the exit code: 500 with the same message.
        "worker_died_500": Stub(
            500, body={"code": 500, "type": "InternalServerException", "message": "Worker died."}
        ),
        # A refusal after the 200 head left (a text past its time budget at render): an error body.
        "late_native": Stub(200, body={"code": 422, "type": "TooCostly", "message": "over the budget"}),
        "late_kserve": Stub(200, body={"error": "over the budget"}),
        "big": Stub(200, body={"translation": "x" * 300_000}),
        "big_cut": Stub(200, body={"translation": "x" * 300_000}, cut_off=True),
    }
    yield made
    for stub in made.values():
        stub.close()


def test_the_client_key_never_reaches_a_replica(tmp_path: Path, stubs: dict[str, Stub]) -> None:
    with front_door(tmp_path, [stubs["ok"].port]) as (door, key):
        response = requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
        assert response.status_code == 200
    seen = {name.lower() for name in stubs["ok"].seen_headers[-1]}
    assert "authorization" not in seen and "x-request-id" in seen


def test_a_dead_busy_or_versionless_replica_is_retried_on_another(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    refusing = socket.socket()  # bound, never listening: nothing answers there
    ports = [bound_port(refusing), stubs["busy"].port, stubs["versionless"].port, stubs["ok"].port]
    with refusing, front_door(tmp_path, ports, tries=4) as (door, key):
        statuses = [
            requests.post(
                f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key)
            ).status_code
            for _ in range(12)
        ]
    assert statuses == [200] * 12


def test_an_answer_cut_off_after_its_head_is_read_whole_from_another_replica(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    """A replica that dies after its 200 head left: the front door has sent the client nothing yet,
    so it sends the request to a replica again, and the client gets one whole answer (issue 43)."""
    whole = json.dumps({"code": 200, "type": "Stub", "message": "stub 200"})
    with front_door(tmp_path, [stubs["cut"].port, stubs["ok"].port]) as (door, key):
        responses = [
            requests.post(
                f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key), timeout=30
            )
            for _ in range(6)
        ]
        log = (door.paths.logs / "access.log").read_text().splitlines()
    assert [(r.status_code, r.text) for r in responses] == [(200, whole)] * 6
    assert {r.headers["Content-Type"] for r in responses} == {"application/json; charset=utf-8"}
    cut, ok = (f"127.0.0.1:{stubs[name].port}" for name in ("cut", "ok"))
    tried_both = [line for line in log if f"upstream={cut}, {ok} upstream_status=200, 200" in line]
    assert tried_both, log[-6:]  # the access log names every replica an answer was read from


def stream_lines(door: FrontDoor, key: str) -> list[dict[str, Any]]:
    """The lines of a streamed translation through `door`; reading fails on a truncated stream."""
    response = requests.post(
        f"{door.url}/predictions/zh_en", json={"text": "x", "stream": True}, headers=bearer(key), timeout=30
    )
    assert response.status_code == 200 and response.headers["Content-Type"] == "application/x-ndjson"
    assert "ts_stream_next" not in response.headers  # TorchServe's own header stops at the door
    return [json.loads(line) for line in response.text.splitlines()]


def test_a_whole_stream_goes_through_unchanged(tmp_path: Path, stubs: dict[str, Stub]) -> None:
    with front_door(tmp_path, [stubs["stream_whole"].port]) as (door, key):
        assert stream_lines(door, key) == [json.loads(line) for line in STREAM]


def test_a_stream_cut_by_a_dead_replica_ends_with_an_explicit_error_line(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    """Its sentences went out as they came, so it cannot be sent elsewhere; the client gets them,
    then a last line that says the stream was cut, and a properly ended response (issue 43)."""
    with front_door(tmp_path, [stubs["stream_cut"].port]) as (door, key):
        lines = stream_lines(door, key)
        errors = (door.paths.logs / "error.log").read_text()
    assert lines[:2] == [json.loads(line) for line in STREAM[:2]]
    assert [line["type"] for line in lines[2:]] == ["StreamCut"] and lines[2]["code"] == 502
    assert "send the request again" in lines[2]["message"]
    assert "cut off; ended with an error line" in errors


def test_the_client_library_says_a_stream_through_the_door_was_cut(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    with front_door(tmp_path, [stubs["stream_cut"].port]) as (door, key):
        response = requests.post(
            f"{door.url}/predictions/zh_en",
            json={"text": "x", "stream": True},
            headers=bearer(key),
            stream=True,
        )
        received = []
        with pytest.raises(StreamCut, match="send the request again") as raised:
            for line in read_stream(response):
                received.append(line)
    assert received == [json.loads(line) for line in STREAM[:2]]
    assert (raised.value.sentences, raised.value.by) == (2, "cut_line")


def test_a_stream_that_stalls_past_the_read_timeout_ends_with_the_error_line(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    with front_door(tmp_path, [stubs["stream_stalled"].port], read_timeout_s=1, tries=1) as (door, key):
        lines = stream_lines(door, key)
    assert lines[:2] == [json.loads(line) for line in STREAM[:2]]
    assert [line["type"] for line in lines[2:]] == ["StreamCut"]


def test_an_answer_of_300_kb_is_read_whole_and_a_cut_one_is_retried(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    """Far past nginx's proxy buffers: read whole (an in-memory subrequest that buffered hung here)."""
    whole = json.dumps({"translation": "x" * 300_000})
    with front_door(tmp_path, [stubs["big_cut"].port, stubs["big"].port]) as (door, key):
        for route in ("/predictions/zh_en", "/translate"):
            body = {"text": "x"} if route != "/translate" else {"q": "x", "source": "zh", "target": "en"}
            response = requests.post(f"{door.url}{route}", json=body, headers=bearer(key), timeout=30)
            assert (response.status_code, response.text) == (200, whole), response.text[:200]


def test_answers_cut_off_on_every_try_get_a_502_never_a_cut_200(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    with front_door(tmp_path, [stubs["cut"].port], tries=2) as (door, key):
        response = requests.post(
            f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key), timeout=30
        )
        errors = (door.paths.logs / "error.log").read_text()
    assert_error(response, 502, "BadGateway")
    assert "answer cut off on 2 attempt(s)" in errors


def test_a_refusal_under_a_replicas_200_reaches_the_client_with_its_own_status(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    """No successful status carries an error body: the front door reads the whole answer first."""
    cases = [
        ("late_native", "/predictions/zh_en", {"text": "x"}, 422),
        ("late_kserve", "/v1/models/zh_en:predict", {"instances": ["x"]}, 422),
        ("late_kserve", "/translate", {"q": "x", "source": "zh", "target": "en"}, 400),  # LibreTranslate's
    ]
    for index, (stub, route, body, status) in enumerate(cases):
        with front_door(tmp_path / str(index), [stubs[stub].port]) as (door, key):
            response = requests.post(f"{door.url}{route}", json=body, headers=bearer(key), timeout=30)
        assert (response.status_code, response.json()) == (status, stubs[stub].body), route
    with front_door(tmp_path / "ok", [stubs["ok"].port]) as (door, key):
        assert requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key)).ok


@pytest.mark.parametrize(("stub", "status"), [("worker_died", 507), ("worker_died_500", 500)])
def test_a_worker_that_died_under_a_request_costs_one_retry_not_one_per_replica(
    tmp_path: Path, stubs: dict[str, Stub], stub: str, status: int
) -> None:
    """TorchServe's "Worker died." (507, or 500 when it read the death before the exit code): the
    request goes to a replica once more, and only once."""
    died = stubs[stub]
    with front_door(tmp_path / "one", [died.port, stubs["ok"].port]) as (door, key):
        answers = [
            requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
            for _ in range(4)
        ]
    assert [a.status_code for a in answers] == [200] * 4
    before = len(died.seen_requests)
    with front_door(tmp_path / "all", [died.port], tries=3) as (door, key):
        answer = requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
    assert answer.status_code == status and len(died.seen_requests) - before == 2


def test_a_500_is_passed_through_not_retried(tmp_path: Path, stubs: dict[str, Stub]) -> None:
    """A request that kills a worker must not get the chance to kill one on every replica."""
    with front_door(tmp_path, [stubs["broken"].port, stubs["ok"].port]) as (door, key):
        responses = [
            requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
            for _ in range(4)
        ]
    assert sorted(r.status_code for r in responses) == [200, 200, 500, 500]
    assert {r.json()["type"] for r in responses if r.status_code == 500} == {"Stub"}  # the replica's own body


def test_no_replica_answers_502_and_healthz_503(tmp_path: Path) -> None:
    # A port bound and never listening: connections to it are refused, and no other process can take
    # it meanwhile (a port only found free could be, by another test's server).
    with socket.socket() as refusing, front_door(tmp_path, [bound_port(refusing)]) as (door, key):
        response = requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
        assert_error(response, 502, "BadGateway")
        assert response.headers["Retry-After"] == "1"
        assert_error(requests.get(f"{door.url}/healthz"), 503, "ServiceUnavailable")


def test_a_replica_that_hangs_answers_504(tmp_path: Path, stubs: dict[str, Stub]) -> None:
    with front_door(tmp_path, [stubs["hanging"].port], read_timeout_s=1, tries=1) as (door, key):
        response = requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
        assert_error(response, 504, "GatewayTimeout")
