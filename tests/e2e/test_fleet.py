"""The front door (nginx) of the replica set: auth, routes, JSON errors, rate limit, health, keys.

The session's one real fleet of one tiny replica (shared_fleet.py: this module uses its front
door). The zero-failure operations under load are in tests/soak/test_fleet_operations.py; slow and
abusive clients in test_front_door_limits.py, adversarial inputs in test_front_door_parsers.py;
replicas that misbehave (stubs) in test_front_door_retries.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from serving import fleet as fleet_cli
from serving import swap as swap_cli
from serving.fleet_keys import KeyStore
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import FLEET_BURST, FLEET_RATE, assert_error, bearer
from tests.waiting import WaitTimeout, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=37)]
pytest_plugins = ["tests.e2e.shared_fleet"]  # shared_fleet: one replica for the session

RATE, BURST = FLEET_RATE, FLEET_BURST
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
