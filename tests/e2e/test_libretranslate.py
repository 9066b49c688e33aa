"""LibreTranslate's API at the front door, as its clients speak it: the real libretranslatepy client
and plain HTTP (JSON, urlencoded and multipart bodies) through real nginx to a real TorchServe.

One real fleet of one tiny replica for what needs a translation; stub replicas (conftest_fleet.py)
to see exactly what reaches a replica, and for nginx's own errors. The tiny stand-in's words are
noise, so shapes, statuses and messages are checked, never wording.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from libretranslatepy import LibreTranslateAPI

from handlers.wire.libretranslate import languages_body
from serving.fleet_keys import KeyStore
from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import Stub, front_door, one_replica_fleet
from tests.e2e.test_contract import CHECKS, CONFIG, SPEC_PATH

pytestmark = pytest.mark.e2e

MISSING_KEY = {
    "error": "Please contact the server operator to get an API key "
    "(send it as api_key or as Authorization: Bearer <key>)"
}
INVALID_KEY = {"error": "Invalid API key"}
PAIR = {"source": "zh", "target": "en"}
# docs/openapi.yaml's LibreTranslate routes, which only the front door serves: fuzzed there, bounded
# as tests/e2e/test_contract.py bounds TorchServe's.
FRONT_DOOR_SCHEMA = schemathesis.openapi.from_path(SPEC_PATH, config=CONFIG).include(tag="libretranslate")


@pytest.fixture(scope="module")
def fleet(tiny_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    door = FrontDoorConfig(
        listen=f"127.0.0.1:{free_port()}", rate_per_second=100, burst=100, probe_timeout_s=2, probe_window_s=3
    )
    with one_replica_fleet(tmp_path_factory.mktemp("fleet"), tiny_store, door) as running:
        yield running


@pytest.fixture(scope="module")
def key(fleet: Fleet) -> str:
    made = KeyStore(fleet.door.paths.keys).add("libretranslate-client")
    fleet.door.reload()
    return made


def post(fleet: Fleet, route: str, **kwargs: Any) -> requests.Response:
    return requests.post(f"{fleet.door.url}{route}", timeout=60, **kwargs)


def assert_error(response: requests.Response, status: int, error: dict[str, str] | str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    assert (body == error) if isinstance(error, dict) else (error in body["error"]), body


def test_libretranslatepy_translates_detects_and_lists_languages(fleet: Fleet, key: str) -> None:
    client = LibreTranslateAPI(fleet.door.url, api_key=key)
    translated = client.translate("汤姆不会同意的。", "zh", "en")
    assert isinstance(translated, str) and translated
    assert client.translate("汤姆不会同意的。", "zh-Hans", "en") == translated
    assert client.detect("汤姆不会同意的。") == [{"confidence": 100.0, "language": "zh-Hans"}]
    assert client.languages() == languages_body()
    assert LibreTranslateAPI(fleet.door.url).languages() == languages_body()  # no key needed


def test_libretranslatepy_sees_the_key_errors(fleet: Fleet) -> None:
    for api_key, status, error in ((None, 400, MISSING_KEY), ("zhen_" + "x" * 43, 403, INVALID_KEY)):
        with pytest.raises(urllib.error.HTTPError) as caught:
            LibreTranslateAPI(fleet.door.url, api_key=api_key).translate("你好", "zh", "en")
        assert caught.value.code == status and json.loads(caught.value.read()) == error


def test_json_form_and_multipart_bodies_translate_alike(fleet: Fleet, key: str) -> None:
    fields = {"q": "是那家。", **PAIR, "api_key": key}
    as_json = post(fleet, "/translate", json=fields)
    as_form = post(fleet, "/translate", data=fields)
    as_multipart = post(fleet, "/translate", files={name: (None, value) for name, value in fields.items()})
    for response in (as_json, as_form, as_multipart):
        assert response.status_code == 200, response.text
        assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert as_json.json()["translatedText"] == as_form.json()["translatedText"]
    assert as_json.json()["translatedText"] == as_multipart.json()["translatedText"]
    assert as_json.json()["standin"] is True and "notice" in as_json.json()  # the stand-in says so

    several = post(fleet, "/translate", json={**fields, "q": ["是那家。", "谢谢！"]}).json()
    assert (
        len(several["translatedText"]) == 2
        and several["translatedText"][0] == as_json.json()["translatedText"]
    )


def test_the_key_goes_in_the_body_or_as_a_bearer_token(fleet: Fleet, key: str) -> None:
    wrong = "zhen_" + "y" * 43
    assert post(fleet, "/translate", json={"q": "你好", **PAIR}, headers=bearer(key)).status_code == 200
    assert post(fleet, "/translate", data={"q": "你好", **PAIR}, headers=bearer(key)).status_code == 200
    # The body's key is the one LibreTranslate reads: it decides when both are sent.
    both = post(fleet, "/translate", json={"q": "你好", **PAIR, "api_key": wrong}, headers=bearer(key))
    assert_error(both, 403, INVALID_KEY)
    assert_error(post(fleet, "/translate", json={"q": "你好", **PAIR}), 400, MISSING_KEY)
    assert_error(post(fleet, "/detect", data={"q": "你好", "api_key": wrong}), 403, INVALID_KEY)
    assert_error(post(fleet, "/detect", data={"q": "你好"}), 400, MISSING_KEY)
    in_url = post(fleet, f"/translate?api_key={key}", data={"q": "你好", **PAIR})
    assert_error(in_url, 400, "not in the URL")


def test_errors_in_libretranslate_words_and_statuses(fleet: Fleet, key: str) -> None:
    def translate(**fields: Any) -> requests.Response:
        return post(fleet, "/translate", json={"api_key": key, **fields})

    assert_error(translate(source="zh", target="en"), 400, {"error": "Invalid request: missing q parameter"})
    assert_error(post(fleet, "/detect", data={"api_key": key}), 400, "missing q parameter")
    assert_error(translate(q="你好", source="zh", target="fr"), 400, {"error": "fr is not supported"})
    assert_error(
        translate(q="你好", source="zh", target="zh"),
        400,
        {"error": "Chinese (zh-Hans) is not available as a target language from Chinese (zh-Hans)"},
    )
    assert_error(translate(q="ありがとうございます。", **PAIR), 400, "Japanese")  # a 422 natively
    assert_error(translate(q=["你好"] * 17, **PAIR), 400, "max_texts_per_request (16)")  # a 413 natively
    assert_error(translate(q="长" * 5001, **PAIR), 400, "max_chars_per_text (5000)")
    # 15,000 characters: 45 KB as multipart, which the front door keeps (a percent-encoded form would
    # be 135 KB, over the replica's 128 KiB): the handler itself answers.
    form = {"q": "长" * 15_000, **PAIR, "api_key": key}
    long_form = post(fleet, "/translate", files={name: (None, value) for name, value in form.items()})
    assert_error(long_form, 400, "max_chars_per_text (5000)")
    too_big = post(fleet, "/translate", data={"q": "你" * 50_000, **PAIR, "api_key": key})
    assert_error(too_big, 400, "request body over 128 KiB")
    assert_error(
        post(fleet, "/translate", data="{", headers={"Content-Type": "application/json"}), 400, "JSON"
    )


def test_source_auto_answers_the_detected_language(fleet: Fleet, key: str) -> None:
    one = post(fleet, "/translate", json={"q": "你好。", "source": "auto", "target": "en", "api_key": key})
    assert one.json()["detectedLanguage"] == {"confidence": 100.0, "language": "zh-Hans"}
    several = post(fleet, "/translate", data={"q": "Hello", "source": "auto", "target": "en", "api_key": key})
    assert several.json()["translatedText"] == "Hello"  # no Chinese: copied, as natively
    assert several.json()["detectedLanguage"] == {"confidence": 0.0, "language": "en"}


def test_alternatives_pass_through(fleet: Fleet, key: str) -> None:
    response = post(fleet, "/translate", json={"q": "是那家。", **PAIR, "alternatives": 2, "api_key": key})
    assert response.status_code == 200, response.text
    body = response.json()
    assert 1 <= len(body["alternatives"]) <= 2 and body["translatedText"] not in body["alternatives"]
    form = post(fleet, "/translate", data={"q": "是那家。", **PAIR, "alternatives": "2", "api_key": key})
    assert form.json()["alternatives"] == body["alternatives"]
    several = post(fleet, "/translate", json={"q": ["是那家。"], **PAIR, "alternatives": 2, "api_key": key})
    assert several.json()["alternatives"] == [body["alternatives"]]
    assert (
        "alternatives" not in post(fleet, "/translate", json={"q": "是那家。", **PAIR, "api_key": key}).json()
    )
    too_many = post(fleet, "/translate", json={"q": "是那家。", **PAIR, "alternatives": 4, "api_key": key})
    assert_error(too_many, 400, "beam count")


def test_keyless_routes_and_cors(fleet: Fleet) -> None:
    assert requests.get(f"{fleet.door.url}/languages", timeout=30).json() == languages_body()
    settings = requests.get(f"{fleet.door.url}/frontend/settings", timeout=30).json()
    assert settings["charLimit"] == 5000 and settings["keyRequired"] is True
    for route in ("/translate", "/detect", "/languages"):
        preflight = requests.options(f"{fleet.door.url}{route}", timeout=30)
        assert preflight.status_code == 204
        assert preflight.headers["Access-Control-Allow-Origin"] == "*"
        assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    assert requests.get(f"{fleet.door.url}/translate", timeout=30).status_code == 405
    assert requests.post(f"{fleet.door.url}/languages", timeout=30).status_code == 405


def test_keys_stay_out_of_every_log_and_file(fleet: Fleet) -> None:
    name = "libretranslate-logged"
    key = KeyStore(fleet.door.paths.keys).add(name)
    fleet.door.reload()
    assert post(fleet, "/translate", json={"q": "你好", **PAIR, "api_key": key}).status_code == 200
    assert post(fleet, "/translate", data={"q": "你好", **PAIR, "api_key": key}).status_code == 200
    assert post(fleet, "/detect", files={"q": (None, "你好"), "api_key": (None, key)}).status_code == 200
    post(fleet, f"/translate?api_key={key}", data={"q": "你好", **PAIR})  # refused, and not logged
    access_log = (fleet.door.paths.logs / "access.log").read_text()
    assert f"client={name}" in access_log
    for path in fleet.run_dir.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


@FRONT_DOOR_SCHEMA.parametrize()
def test_the_front_door_keeps_the_contract(case: schemathesis.Case[Any], fleet: Fleet, key: str) -> None:
    case.call_and_validate(base_url=fleet.door.url, headers=bearer(key), checks=CHECKS, timeout=120)


def test_what_reaches_a_replica_has_no_key(tmp_path: Path) -> None:
    stub = Stub(200)
    try:
        with front_door(tmp_path, [stub.port]) as (door, key):
            url = f"{door.url}/translate?source=zz&extra=1"
            fields = {"q": "你好", **PAIR, "api_key": key, "secret": "s"}
            assert requests.post(url, json=fields, headers=bearer("zhen_" + "z" * 43)).status_code == 200
            assert requests.post(url, data=fields).status_code == 200
            files: dict[str, tuple[str | None, str]] = {name: (None, value) for name, value in fields.items()}
            files["upload"] = ("notes.txt", "file content")  # a file: not a field, as in LibreTranslate
            assert requests.post(f"{door.url}/detect", files=files).status_code == 200
    finally:
        stub.close()
    (json_path, json_body), (form_path, form_body), (detect_path, detect_body) = stub.seen_requests
    assert json_path == form_path == detect_path == "/predictions/zh_en"  # the client's query stays out
    json_headers, form_headers, detect_headers = stub.seen_headers
    # JSON: all but the key, and the route.
    assert json_headers["Content-Type"] == "application/json"
    assert json.loads(json_body) == {"q": "你好", **PAIR, "secret": "s", "libretranslate": "translate"}
    # A form: LibreTranslate's fields only, the query string first (werkzeug's request.values).
    assert form_fields(form_headers, form_body) == {
        "q": "你好",
        "source": "zz",
        "target": "en",
        "libretranslate": "translate",
    }
    assert form_fields(detect_headers, detect_body) == {"q": "你好", **PAIR, "libretranslate": "detect"}
    for headers in stub.seen_headers:
        assert "authorization" not in {name.lower() for name in headers}


def form_fields(headers: dict[str, str], body: bytes) -> dict[str, str]:
    """The fields of the multipart form the front door sends on."""
    message = BytesParser(policy=policy.HTTP).parsebytes(
        f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body
    )
    assert message.is_multipart()
    fields = {}
    for part in message.iter_parts():
        value = part.get_payload(decode=True)
        assert isinstance(value, bytes)
        fields[str(part.get_param("name", header="content-disposition"))] = value.decode()  # raw UTF-8
    return fields


def test_nginx_errors_come_in_libretranslate_shape(tmp_path: Path) -> None:
    with front_door(tmp_path / "none", [free_port()]) as (door, key):
        response = requests.post(f"{door.url}/translate", json={"q": "x", **PAIR, "api_key": key})
        assert_error(response, 502, "no healthy replica")
        assert (
            response.headers["Retry-After"] == "1" and response.headers["Access-Control-Allow-Origin"] == "*"
        )
    stub = Stub(200)
    try:
        with front_door(tmp_path / "limited", [stub.port], rate_per_second=1, burst=1) as (door, key):

            def translate(_: int) -> requests.Response:
                return requests.post(f"{door.url}/translate", json={"q": "x", **PAIR, "api_key": key})

            with ThreadPoolExecutor(max_workers=4) as pool:
                responses = list(pool.map(translate, range(8)))
    finally:
        stub.close()
    limited = [response for response in responses if response.status_code == 429]
    assert limited, [response.status_code for response in responses]
    assert_error(limited[0], 429, "Slowdown: rate limit of this API key exceeded")
    assert limited[0].headers["Retry-After"] == "1"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
