"""The front door (nginx) of the replica set: auth, routes, JSON errors, rate limit, health, retries.

The session's one real fleet of one tiny replica (conftest_fleet.shared_fleet: this module uses its
front door) for what needs a translation; stub replicas for what needs a replica to misbehave. The
zero-failure operations under load are in tests/soak/test_fleet_operations.py; slow and abusive
clients in test_front_door_abuse.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from serving import fleet as fleet_cli
from serving import swap as swap_cli
from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import FLEET_BURST, FLEET_RATE, Stub, front_door
from tests.waiting import WaitTimeout, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=37)]
pytest_plugins = ["tests.e2e.shared_fleet"]  # shared_fleet: one replica for the session

RATE, BURST = FLEET_RATE, FLEET_BURST
# A streamed answer as the handler writes it: one line per sentence, then the whole response.
STREAM = (
    '{"sentence": 0, "translation": "One."}',
    '{"sentence": 1, "translation": "Two."}',
    '{"translation": "One. Two.", "stats": {}}',
)
BIG = b'{"text": "' + "你".encode() * 700_000 + b'"}'  # 2.1 MB
ROUTES = (
    "/predictions/zh_en",
    "/predictions/zh_en/1.0-int8",
    "/v1/models/zh_en:predict",
    "/v2/models/zh_en/infer",
)
NOT_ROUTED = [
    ("GET", "/models"),
    ("POST", "/models?url=zh_en_fp32.mar"),
    ("GET", "/models/zh_en"),
    ("PUT", "/models/zh_en/1.0-int8/set-default"),
    ("DELETE", "/models/zh_en/1.0-int8"),
    ("POST", "/token?type=inference"),
    ("GET", "/ping"),
    ("GET", "/metrics"),
    ("OPTIONS", "/"),
    ("GET", "/api-description"),
    ("POST", "/predictions/other_model"),
    ("POST", "/predictions/zh_en/1.0-int8/extra"),
    ("POST", "/explanations/zh_en"),
    ("POST", "/v2/models/zh_en/ready"),
    ("GET", "/v2/models/zh_en"),
    ("GET", "/predictions/zh_en"),
    ("PUT", "/predictions/zh_en"),
    ("POST", "/healthz"),
    ("POST", "/status"),
    ("GET", "/site/key_file.json"),
    ("GET", "/_replica_metrics/8082"),
]


def bound_port(sock: socket.socket) -> int:
    sock.bind(("127.0.0.1", 0))
    return int(sock.getsockname()[1])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_error(response: requests.Response, code: int, kind: str) -> None:
    assert response.status_code == code, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["code"] == code and response.json()["type"] == kind, response.text


def cli(fleet: Fleet, *args: str) -> None:
    assert fleet_cli.main([*args, "--dir", str(fleet.run_dir)]) == 0


@pytest.fixture(scope="module")
def fleet(shared_fleet: Fleet) -> Fleet:
    return shared_fleet


@pytest.fixture
def key(fleet: Fleet) -> str:
    """A fresh client key per test (the rate limit is per key), made as an operator would."""
    name = f"client-{len(KeyStore(fleet.door.paths.keys).entries())}"
    out = fleet.run_dir / f"{name}.json"
    cli(fleet, "keys", "add", name, "--out", str(out))
    return str(json.loads(out.read_text())["inference"]["key"])


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
        # A refusal after the 200 head left (a text past its time budget at render): an error body.
        "late_native": Stub(200, body={"code": 422, "type": "TooCostly", "message": "over the budget"}),
        "late_kserve": Stub(200, body={"error": "over the budget"}),
        "big": Stub(200, body={"translation": "x" * 300_000}),
        "big_cut": Stub(200, body={"translation": "x" * 300_000}, cut_off=True),
    }
    yield made
    for stub in made.values():
        stub.close()


def test_every_route_translates_through_one_key(fleet: Fleet, key: str) -> None:
    bodies = [{"text": "你好"}, {"text": "你好"}, {"instances": ["你好"]}]
    v2 = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["你好"]}]}
    for route, body in zip(ROUTES, [*bodies, v2], strict=True):
        response = requests.post(f"{fleet.door.url}{route}", json=body, headers=bearer(key), timeout=60)
        assert response.status_code == 200, (route, response.text[:300])
        assert "translation" in response.text or "predictions" in response.text or "outputs" in response.text


def test_without_a_valid_key_every_route_answers_401(fleet: Fleet) -> None:
    fake = "zhen_" + "x" * 43
    for headers in ({}, bearer(fake), {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer"}):
        for route in ROUTES:
            response = requests.post(
                f"{fleet.door.url}{route}", json={"text": "你好"}, headers=headers, timeout=30
            )
            assert_error(response, 401, "Unauthorized")
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path"), NOT_ROUTED)
def test_nothing_else_is_routed(fleet: Fleet, key: str, method: str, path: str) -> None:
    response = requests.request(method, f"{fleet.door.url}{path}", json={}, headers=bearer(key), timeout=30)
    assert_error(response, 404, "NotFound")


def healthz_until(fleet: Fleet, status: int, within: float) -> requests.Response:
    """/healthz until it answers `status`: a probe's good result is reused for health_cache_s."""

    seen: list[requests.Response] = []

    def answered() -> bool:
        seen.append(requests.get(f"{fleet.door.url}/healthz", timeout=30))
        return seen[-1].status_code == status

    wait_until(answered, within, lambda: (seen[-1].status_code, seen[-1].text), 0.1)
    return seen[-1]


def test_healthz_needs_no_key_and_reflects_whether_a_replica_translates(fleet: Fleet) -> None:
    response = requests.get(f"{fleet.door.url}/healthz", timeout=30)
    assert response.status_code == 200 and response.json() == {"status": "Healthy"}
    server = fleet.server(fleet.names()[0])
    server.client.scale("1.0-int8", 0)  # no worker: nothing can translate, yet TorchServe's /ping ...
    try:
        assert server.client.ping().json()["status"] == "Healthy"  # ... still says Healthy
        # Within one cache interval (1 s) plus a probe: a failed probe is never reused.
        within = fleet.state.front_door.health_cache_s + fleet.state.front_door.probe_window_s
        assert_error(healthz_until(fleet, 503, within), 503, "ServiceUnavailable")
    finally:
        server.client.scale("1.0-int8", 1)  # one worker is enough for the tests after this one
    assert requests.get(f"{fleet.door.url}/healthz", timeout=30).status_code == 200


@pytest.mark.timed  # counts probes per second of wall clock: run alone
def test_a_flood_of_health_checks_runs_one_probe_per_interval(fleet: Fleet) -> None:
    """240 health checks from 8 clients over about 3 s: the replica translates a probe about once a
    second (a result is reused for 1-2 s: nginx counts cache time in whole seconds), not 240 times."""
    log = next((fleet.run_dir / "replicas").rglob("access_log.log"))

    def probes() -> int:  # the replica's own log: probes come as HTTP/1.0, client requests as 1.1
        return log.read_text().count('"POST /predictions/zh_en HTTP/1.0" 200')

    before, began = probes(), time.monotonic()

    def check(_: int) -> int:
        time.sleep(0.1)
        return requests.get(f"{fleet.door.url}/healthz", timeout=30).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(check, range(240)))
    seconds = time.monotonic() - began
    assert statuses == [200] * 240
    # TorchServe writes its access log line after the answer.
    with contextlib.suppress(WaitTimeout):  # too few is the assertion's to report
        wait_until(lambda: probes() - before >= seconds / 2 - 1, 5, "probes logged", 0.2)
    ran = probes() - before
    assert seconds / 2 - 1 <= ran <= seconds / fleet.state.front_door.health_cache_s + 2, (ran, seconds)


@pytest.mark.parametrize("client", ["requests", "urllib"])
def test_an_oversized_body_gets_a_json_413_not_a_reset(fleet: Fleet, key: str, client: str) -> None:
    url = f"{fleet.door.url}/predictions/zh_en"
    headers = {**bearer(key), "Content-Type": "application/json"}
    if client == "requests":
        response = requests.post(url, data=BIG, headers=headers, timeout=60)
        assert_error(response, 413, "PayloadTooLarge")
    else:
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(urllib.request.Request(url, data=BIG, headers=headers), timeout=60)
        assert error.value.code == 413
        assert json.loads(error.value.read())["type"] == "PayloadTooLarge"
    # Under the limit, the replica's own limits answer, in the same shape.
    too_many = {"text": ["你好"] * 129}
    assert requests.post(url, json=too_many, headers=bearer(key), timeout=60).json()["code"] == 413


def test_a_key_over_its_rate_gets_429_with_retry_after_and_others_do_not(fleet: Fleet, key: str) -> None:
    """3 x BURST requests sent at once: nginx admits BURST + 1, plus RATE (1) for every second the
    sending takes, however long a translation lasts (they are counted as they arrive)."""
    url = f"{fleet.door.url}/predictions/zh_en"
    count = 3 * BURST
    together = threading.Barrier(count)

    def post(_: int) -> requests.Response:
        together.wait()
        return requests.post(url, json={"text": "你好", "max_new_tokens": 1}, headers=bearer(key), timeout=60)

    with ThreadPoolExecutor(max_workers=count) as pool:
        responses = list(pool.map(post, range(count)))
    statuses = [response.status_code for response in responses]
    assert statuses.count(200) >= BURST and statuses.count(429) >= BURST, statuses
    assert statuses.count(200) + statuses.count(429) == count, statuses
    limited = next(response for response in responses if response.status_code == 429)
    assert_error(limited, 429, "TooManyRequests")
    assert limited.headers["Retry-After"] == "1"
    other = KeyStore(fleet.door.paths.keys).add("another-client")
    fleet.door.reload()
    assert requests.post(url, json={"text": "你好"}, headers=bearer(other), timeout=60).status_code == 200


def test_keys_are_added_and_revoked_without_a_restart_and_never_stored_or_logged(fleet: Fleet) -> None:
    master, url = fleet.door.master_pid(), f"{fleet.door.url}/predictions/zh_en"
    out = fleet.run_dir / "rotating.json"
    cli(fleet, "keys", "add", "rotating", "--out", str(out))
    key = json.loads(out.read_text())["inference"]["key"]
    assert requests.post(url, json={"text": "你好"}, headers=bearer(key), timeout=60).status_code == 200
    cli(fleet, "keys", "revoke", "rotating")
    assert_error(
        requests.post(url, json={"text": "你好"}, headers=bearer(key), timeout=60), 401, "Unauthorized"
    )
    assert fleet.door.master_pid() == master
    for private in (fleet.door.paths.keys, out):
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    for path in fleet.run_dir.rglob("*"):
        if path.is_file() and path.suffix != ".json":  # the key handout files are json
            assert key.encode() not in path.read_bytes(), path


def test_swap_drives_a_replica_without_a_key(fleet: Fleet) -> None:
    """`python -m serving.swap --no-auth` on one replica (`serving.fleet roll` does every replica)."""
    server = fleet.server(fleet.names()[0])
    args = ["--to", "1.0-int8", "--no-auth", "--model-store", str(server.model_store)]
    args += [
        "--inference",
        server.client.endpoints.inference,
        "--management",
        server.client.endpoints.management,
    ]
    assert swap_cli.main(args) == 0  # already the default: it asked the management API, with no key


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


def test_a_worker_that_died_under_a_request_costs_one_retry_not_one_per_replica(
    tmp_path: Path, stubs: dict[str, Stub]
) -> None:
    """TorchServe's 507 "Worker died.": the request goes to a replica once more, and only once."""
    died = stubs["worker_died"]
    with front_door(tmp_path / "one", [died.port, stubs["ok"].port]) as (door, key):
        answers = [
            requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
            for _ in range(4)
        ]
    assert [a.status_code for a in answers] == [200] * 4
    before = len(died.seen_requests)
    with front_door(tmp_path / "all", [died.port], tries=3) as (door, key):
        answer = requests.post(f"{door.url}/predictions/zh_en", json={"text": "x"}, headers=bearer(key))
    assert answer.status_code == 507 and len(died.seen_requests) - before == 2


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
