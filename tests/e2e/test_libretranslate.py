"""LibreTranslate's API at the front door, as its clients speak it: the real libretranslatepy and
deep-translator clients and plain HTTP (JSON, urlencoded and multipart bodies, query strings)
through real nginx to a real TorchServe.

This module's own front door in front of the session's one tiny replica (conftest_fleet.shared_fleet)
for what needs a translation; stub replicas to see exactly what reaches a replica, and for nginx's
own errors. The tiny stand-in's words are noise, so shapes, statuses and messages are checked,
never wording.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
import yaml
from deep_translator import LibreTranslator
from deep_translator.exceptions import AuthorizationException
from libretranslatepy import LibreTranslateAPI

from handlers.wire.libretranslate import languages_body
from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.ports import free_port
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import Stub, bearer, front_door, replica_port
from tests.e2e.test_contract import CHECKS, CONFIG, SPEC_PATH

pytestmark = pytest.mark.e2e
pytest_plugins = ["tests.e2e.shared_fleet", "tests.e2e.libretranslate_door"]  # the replica; door and key

MISSING_KEY = {
    "error": "Please contact the server operator to get an API key "
    "(send it as api_key or as Authorization: Bearer <key>)"
}
INVALID_KEY = {"error": "Invalid API key"}
PAIR = {"source": "zh", "target": "en"}
# docs/openapi.yaml's LibreTranslate routes, which only the front door serves: fuzzed there, bounded
# as tests/e2e/test_contract.py bounds TorchServe's.
FRONT_DOOR_SCHEMA = schemathesis.openapi.from_path(SPEC_PATH, config=CONFIG).include(tag="libretranslate")


def post(door: FrontDoor, route: str, **kwargs: Any) -> requests.Response:
    return requests.post(f"{door.url}{route}", timeout=60, **kwargs)


def assert_error(response: requests.Response, status: int, error: dict[str, str] | str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    assert (body == error) if isinstance(error, dict) else (error in body["error"]), body


def test_libretranslatepy_translates_detects_and_lists_languages(door: FrontDoor, key: str) -> None:
    client = LibreTranslateAPI(door.url, api_key=key)
    translated = client.translate("汤姆不会同意的。", "zh", "en")
    assert isinstance(translated, str) and translated
    assert client.translate("汤姆不会同意的。", "zh-Hans", "en") == translated
    assert client.detect("汤姆不会同意的。") == [{"confidence": 100.0, "language": "zh-Hans"}]
    assert client.languages() == languages_body()
    assert LibreTranslateAPI(door.url).languages() == languages_body()  # no key needed


def test_libretranslatepy_sees_the_key_errors(door: FrontDoor) -> None:
    for api_key, status, error in ((None, 400, MISSING_KEY), ("zhen_" + "x" * 43, 403, INVALID_KEY)):
        with pytest.raises(urllib.error.HTTPError) as caught:
            LibreTranslateAPI(door.url, api_key=api_key).translate("你好", "zh", "en")
        assert caught.value.code == status and json.loads(caught.value.read()) == error


def test_a_null_or_empty_key_is_no_key(door: FrontDoor) -> None:
    """Mastodon, Weblate and the PHP client send null or "" when no key is configured."""
    for sent in (
        {"json": {"q": "你好", **PAIR, "api_key": None}},
        {"json": {"q": "你好", **PAIR, "api_key": ""}},
    ):
        assert_error(post(door, "/translate", **sent), 400, MISSING_KEY)
    assert_error(post(door, "/detect", data={"q": "你好", "api_key": ""}), 400, MISSING_KEY)


def test_json_form_and_multipart_bodies_translate_alike(door: FrontDoor, key: str) -> None:
    fields = {"q": "是那家。", **PAIR, "api_key": key}
    as_json = post(door, "/translate", json=fields)
    as_form = post(door, "/translate", data=fields)
    as_multipart = post(door, "/translate", files={name: (None, value) for name, value in fields.items()})
    for response in (as_json, as_form, as_multipart):
        assert response.status_code == 200, response.text
        assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert as_json.json()["translatedText"] == as_form.json()["translatedText"]
    assert as_json.json()["translatedText"] == as_multipart.json()["translatedText"]
    assert as_json.json()["standin"] is True and "notice" in as_json.json()  # the stand-in says so

    several = post(door, "/translate", json={**fields, "q": ["是那家。", "谢谢！"]}).json()
    assert (
        len(several["translatedText"]) == 2
        and several["translatedText"][0] == as_json.json()["translatedText"]
    )


def test_the_key_goes_in_the_body_or_as_a_bearer_token(door: FrontDoor, key: str) -> None:
    wrong = "zhen_" + "y" * 43
    assert post(door, "/translate", json={"q": "你好", **PAIR}, headers=bearer(key)).status_code == 200
    assert post(door, "/translate", data={"q": "你好", **PAIR}, headers=bearer(key)).status_code == 200
    # The body's key is the one LibreTranslate reads: it decides when both are sent.
    both = post(door, "/translate", json={"q": "你好", **PAIR, "api_key": wrong}, headers=bearer(key))
    assert_error(both, 403, INVALID_KEY)
    assert_error(post(door, "/translate", json={"q": "你好", **PAIR}), 400, MISSING_KEY)
    assert_error(post(door, "/detect", data={"q": "你好", "api_key": wrong}), 403, INVALID_KEY)
    assert_error(post(door, "/detect", data={"q": "你好"}), 400, MISSING_KEY)
    # In the query string too, as LibreTranslate reads it (request.values: the query string first).
    assert post(door, f"/translate?api_key={key}", data={"q": "你好", **PAIR}).status_code == 200
    query_first = post(door, f"/translate?api_key={wrong}", data={"q": "你好", **PAIR, "api_key": key})
    assert_error(query_first, 403, INVALID_KEY)
    # A JSON body is all LibreTranslate reads then: a key in the query string does not count.
    assert_error(post(door, f"/translate?api_key={key}", json={"q": "你好", **PAIR}), 400, MISSING_KEY)


def test_deep_translator_sends_everything_in_the_query_string(door: FrontDoor, key: str) -> None:
    """deep-translator's LibreTranslator (1.11.4, deep_translator/libre.py) POSTs an empty body with
    q, source, target, format and api_key as query parameters, as LibreTranslate accepts them."""
    client = LibreTranslator(source="zh", target="en", api_key=key, custom_url=f"{door.url}/")
    translated = client.translate("汤姆不会同意的。")
    assert isinstance(translated, str) and translated
    as_json = post(door, "/translate", json={"q": "汤姆不会同意的。", **PAIR, "api_key": key})
    assert translated == as_json.json()["translatedText"]
    # The same limits as a body: over a text's 5,000 characters is the handler's 400.
    long_text = post(door, "/translate", params={"q": "长" * 5001, **PAIR, "api_key": key})
    assert_error(long_text, 400, "max_chars_per_text (5000)")
    wrong = LibreTranslator(source="zh", target="en", api_key="zhen_" + "x" * 43, custom_url=f"{door.url}/")
    with pytest.raises(AuthorizationException):  # what deep-translator raises on LibreTranslate's 403
        wrong.translate("你好")


def test_errors_in_libretranslate_words_and_statuses(door: FrontDoor, key: str) -> None:
    def translate(**fields: Any) -> requests.Response:
        return post(door, "/translate", json={"api_key": key, **fields})

    assert_error(translate(source="zh", target="en"), 400, {"error": "Invalid request: missing q parameter"})
    assert_error(post(door, "/detect", data={"api_key": key}), 400, "missing q parameter")
    assert_error(translate(q="你好", source="zh", target="fr"), 400, {"error": "fr is not supported"})
    assert_error(
        translate(q="你好", source="zh", target="zh"),
        400,
        {"error": "Chinese (zh-Hans) is not available as a target language from Chinese (zh-Hans)"},
    )
    assert_error(translate(q="ありがとうございます。", **PAIR), 400, "Japanese")  # a 422 natively
    assert_error(translate(q=["你好"] * 129, **PAIR), 400, "max_texts_per_request (128)")  # a 413 natively
    assert_error(translate(q="长" * 5001, **PAIR), 400, "max_chars_per_text (5000)")
    # 15,000 characters: 45 KB as multipart, which the front door keeps (a percent-encoded form would
    # be 135 KB, over the replica's 128 KiB): the handler itself answers.
    form = {"q": "长" * 15_000, **PAIR, "api_key": key}
    long_form = post(door, "/translate", files={name: (None, value) for name, value in form.items()})
    assert_error(long_form, 400, "max_chars_per_text (5000)")
    too_big = post(door, "/translate", data={"q": "你" * 50_000, **PAIR, "api_key": key})
    assert_error(too_big, 400, "request body over 128 KiB")
    assert_error(
        post(door, "/translate", data="{", headers={"Content-Type": "application/json"}), 400, "JSON"
    )


def test_source_auto_answers_the_detected_language(door: FrontDoor, key: str) -> None:
    one = post(door, "/translate", json={"q": "你好。", "source": "auto", "target": "en", "api_key": key})
    assert one.json()["detectedLanguage"] == {"confidence": 100.0, "language": "zh-Hans"}
    several = post(door, "/translate", data={"q": "Hello", "source": "auto", "target": "en", "api_key": key})
    assert several.json()["translatedText"] == "Hello"  # no Chinese: copied, as natively
    assert several.json()["detectedLanguage"] == {"confidence": 0.0, "language": "en"}


def test_alternatives_pass_through(door: FrontDoor, key: str) -> None:
    response = post(door, "/translate", json={"q": "是那家。", **PAIR, "alternatives": 2, "api_key": key})
    assert response.status_code == 200, response.text
    body = response.json()
    assert 1 <= len(body["alternatives"]) <= 2 and body["translatedText"] not in body["alternatives"]
    form = post(door, "/translate", data={"q": "是那家。", **PAIR, "alternatives": "2", "api_key": key})
    assert form.json()["alternatives"] == body["alternatives"]
    several = post(door, "/translate", json={"q": ["是那家。"], **PAIR, "alternatives": 2, "api_key": key})
    assert several.json()["alternatives"] == [body["alternatives"]]
    assert (
        "alternatives" not in post(door, "/translate", json={"q": "是那家。", **PAIR, "api_key": key}).json()
    )
    # A ceiling, as in LibreTranslate (no limit there): at the default beam 4, 3 at most come back.
    for asked in (4, 50):
        many = post(door, "/translate", json={"q": "是那家。", **PAIR, "alternatives": asked, "api_key": key})
        assert many.status_code == 200 and 1 <= len(many.json()["alternatives"]) <= 3, many.text[:300]


def test_keyless_routes_and_cors(door: FrontDoor) -> None:
    assert requests.get(f"{door.url}/languages", timeout=30).json() == languages_body()
    settings = requests.get(f"{door.url}/frontend/settings", timeout=30).json()
    assert settings["charLimit"] == 5000 and settings["keyRequired"] is True
    for route in ("/translate", "/detect", "/languages"):
        preflight = requests.options(f"{door.url}{route}", timeout=30)
        assert preflight.status_code == 204
        assert preflight.headers["Access-Control-Allow-Origin"] == "*"
        assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    assert requests.get(f"{door.url}/translate", timeout=30).status_code == 405
    assert requests.post(f"{door.url}/languages", timeout=30).status_code == 405


def test_health_and_suggest_answer_as_libretranslate_does(door: FrontDoor) -> None:
    health = requests.get(f"{door.url}/health", timeout=30)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    suggest = requests.post(f"{door.url}/suggest", data={"q": "你好", "s": "Hi", **PAIR}, timeout=30)
    assert (suggest.status_code, suggest.json()) == (
        403,
        {"error": "Suggestions are disabled on this server."},
    )
    assert requests.options(f"{door.url}/suggest", timeout=30).status_code == 204
    # Files (test_libretranslate_files.py): /frontend/settings offers the formats that round trip.
    settings = requests.get(f"{door.url}/frontend/settings", timeout=30).json()
    assert settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [
        ".txt",
        ".html",
        ".htm",
        ".srt",
        ".vtt",
        ".md",
        ".docx",
        ".odt",
    ]


def test_spec_answers_our_openapi_document_as_json(door: FrontDoor) -> None:
    spec = requests.get(f"{door.url}/spec", timeout=30)
    assert spec.status_code == 200 and spec.headers["content-type"].startswith("application/json")
    assert spec.json() == yaml.safe_load(SPEC_PATH.read_text())
    assert {"/translate", "/detect", "/languages", "/spec"} <= set(spec.json()["paths"])
    assert requests.post(f"{door.url}/spec", timeout=30).status_code == 405


def test_weblate_chunks_chinese_codes_and_blank_texts(door: FrontDoor, key: str) -> None:
    """Weblate sends 20 texts at a time; SubtitleEdit and others send zh-CN or zh_TW; an empty text
    in a list gets an empty translation and the rest are translated, as LibreTranslate does."""
    chunk = [f"第{number}句。" for number in range(20)]
    answer = post(door, "/translate", json={"q": chunk, **PAIR, "api_key": key})
    assert answer.status_code == 200, answer.text[:300]
    assert len(answer.json()["translatedText"]) == 20
    for source in ("zh-CN", "zh_TW", "ZH-Hans", "zho"):
        coded = post(
            door, "/translate", json={"q": "你好。", "source": source, "target": "en-US", "api_key": key}
        )
        assert coded.status_code == 200 and isinstance(coded.json()["translatedText"], str), (
            source,
            coded.text,
        )
    blanks = post(door, "/translate", json={"q": ["", "你好。", " "], **PAIR, "api_key": key}).json()
    assert blanks["translatedText"][0] == blanks["translatedText"][2] == "" and blanks["translatedText"][1]
    only_blanks = post(door, "/translate", json={"q": ["", ""], **PAIR, "api_key": key})
    assert (only_blanks.status_code, only_blanks.json()["translatedText"]) == (200, ["", ""])


def test_keys_stay_out_of_every_log_and_file(door: FrontDoor, shared_fleet: Fleet, tmp_path: Path) -> None:
    """A key in the body, a form, a multipart part or the query string, on requests that succeed and
    on requests that fail in every place that logs (the gate, njs, the key's rate, the body limit):
    in no file of the front door or the replica."""
    name = "libretranslate-logged"
    key = KeyStore(door.paths.keys).add(name)
    door.reload()
    assert post(door, "/translate", json={"q": "你好", **PAIR, "api_key": key}).status_code == 200
    assert post(door, "/translate", data={"q": "你好", **PAIR, "api_key": key}).status_code == 200
    assert post(door, "/detect", files={"q": (None, "你好"), "api_key": (None, key)}).status_code == 200
    in_query = {"q": "你好", **PAIR, "api_key": key}
    assert post(door, "/translate", params=in_query).status_code == 200
    assert post(door, "/translate", params={**in_query, "target": "fr"}).status_code == 400  # the handler's
    json_type = {"Content-Type": "application/json"}
    bad_json = post(door, "/translate", params=in_query, data="{", headers=json_type)
    assert bad_json.status_code == 400  # njs's
    too_big = post(door, "/translate", params=in_query, data={"q": "你" * 50_000})
    assert too_big.status_code == 400  # the gate's 413, in LibreTranslate's words
    too_long = post(door, "/translate", params={**in_query, "q": "你" * 10_000})  # a 90 KB request line
    assert too_long.status_code == 414 and too_long.json()["type"] == "URITooLong"
    assert f"client={name}" in (door.paths.logs / "access.log").read_text()
    # The key's rate: this module's door allows 100/s for schemathesis, which only a fast host
    # exceeds. A door of its own at 1/s (bursts of 1), before the same replica, limits on any host.
    port = replica_port(shared_fleet)
    limits = {"rate_per_second": 1, "burst": 1, "probe_timeout_s": 2, "probe_window_s": 3}
    with front_door(tmp_path / "limited", [port], **limits) as (limited, limited_key):
        limited.wait_healthy()
        over_rate = {"q": "你好", **PAIR, "api_key": limited_key}
        statuses = [post(limited, "/detect", params=over_rate).status_code for _ in range(4)]
        assert 429 in statuses, statuses
        assert "limiting requests" in (limited.paths.logs / "error.log").read_text()  # logged ...
        secrets = (key.encode(), limited_key.encode())
        directories = [shared_fleet.run_dir]
        directories += [place for d in (door, limited) for place in (d.paths.run_dir, d.paths.worker_dir)]
        for path in (path for directory in directories for path in directory.rglob("*")):
            if path.is_file():
                content = path.read_bytes()
                assert not any(secret in content for secret in secrets), path  # ... without a key


@FRONT_DOOR_SCHEMA.parametrize()
def test_the_front_door_keeps_the_contract(case: schemathesis.Case[Any], door: FrontDoor, key: str) -> None:
    case.call_and_validate(base_url=door.url, headers=bearer(key), checks=CHECKS, timeout=120)


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
