"""LibreTranslate's integrations at the front door, as they really call it: Weblate's and
Nextcloud's requests replayed from their sources, and the keyless mode a private network runs them
with (SECURITY.md, "Keyed or keyless").

A front door of this module's own before the session's one tiny replica
(tests/e2e/libretranslate_door.py), and test_libretranslate.py's helpers; the tiny stand-in's
words are noise, so shapes, statuses and markup are checked, never wording.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import requests

from serving.front_door import FrontDoor
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import bearer, front_door, replica_port
from tests.e2e.test_libretranslate import INVALID_KEY, MISSING_KEY, PAIR, assert_error, post

pytestmark = pytest.mark.e2e
pytest_plugins = ["tests.e2e.shared_fleet", "tests.e2e.libretranslate_door"]  # the replica; door and key

# Requests replayed as the integrations' sources build them (read 2026-11-28; their code is not
# copied here, only what goes on the wire): Weblate 5's LibreTranslate machinery
# (weblate/machinery/libretranslate.py) and Nextcloud's integration_libretranslate app through the
# PHP client it uses (jefs42/libretranslate, src/LibreTranslate.php: curl with an array of fields).
WEBLATE = {"User-Agent": "Weblate/5.15"}
# Weblate's texts: placeholders it masks as [X<n>X], plural forms, markup, several lines.
WEBLATE_TEXTS = [f"第{n}句：[X{n}X] 个文件已删除。" for n in range(16)] + [
    "<b>注意</b>：不可撤销。",
    "第一行\n第二行",
    "%s 已保存",
    "{count} 条消息",
]
EMPTY_MULTIPART = {"Content-Type": "multipart/form-data; boundary=------------------------php"}


def test_weblate_replayed_languages_then_chunks_of_20_then_ltengine_one_by_one(
    door: FrontDoor, key: str
) -> None:
    """Weblate lists /languages and keeps a pair only when both codes are there (its zh_Hans mapped
    to zh-Hans), then POSTs JSON chunks of 20 with api_key in the body and wants as many strings
    back; its LTEngine flavour sends each text alone as a string and wants a string."""
    session = requests.Session()
    session.headers.update(WEBLATE)
    codes = [language["code"] for language in session.get(f"{door.url}/languages", timeout=20).json()]
    source = "zh_Hans".replace("_", "-")  # Weblate's map_language_code
    assert source in codes and "en" in codes
    body = {"api_key": key, "q": WEBLATE_TEXTS, "source": source, "target": "en"}
    chunk = session.post(f"{door.url}/translate", json=body, timeout=20)
    assert chunk.status_code == 200, chunk.text[:300]
    translated = chunk.json()["translatedText"]
    assert isinstance(translated, list) and len(translated) == len(WEBLATE_TEXTS) == 20
    assert all(isinstance(text, str) and text for text in translated)
    alone = session.post(f"{door.url}/translate", json={**body, "q": WEBLATE_TEXTS[16]}, timeout=20)
    assert alone.status_code == 200 and isinstance(alone.json()["translatedText"], str), alone.text[:300]


def test_nextcloud_replayed_probe_settings_languages_detect_and_html(door: FrontDoor, key: str) -> None:
    """The PHP client's order: POST / (a probe whose answer it ignores, but a hang or a refused
    connection fails the app's start), GET /frontend/settings and GET /languages (both with an
    empty form body, as curl sends an empty field array), the admin's codes checked against
    /languages, then detect with q and api_key in the query string and an empty body, and
    translate as a multipart form with format=html."""
    empty_bodies: list[dict[str, Any]] = [
        {"data": b""},
        {"data": b"--------------------------php--\r\n", "headers": EMPTY_MULTIPART},
    ]
    for empty in empty_bodies:
        probe = requests.post(f"{door.url}/", timeout=20, **empty)
        assert probe.status_code < 500, probe.status_code
        settings = requests.request("GET", f"{door.url}/frontend/settings", timeout=20, **empty)
        assert settings.status_code == 200 and settings.json()["keyRequired"] is True
        languages = requests.request("GET", f"{door.url}/languages", timeout=20, **empty).json()
        names = {language["code"]: language["name"] for language in languages}
        assert "zh-Hans" in names and "en" in names  # setSource / setTarget would throw otherwise
        query = "?" + urllib.parse.urlencode({"q": "汤姆不会同意的。", "api_key": key})
        detected = requests.post(f"{door.url}/detect{query}", timeout=20, **empty)
        assert detected.status_code == 200, detected.text[:300]
        assert detected.json()[0]["language"] == "zh-Hans"  # the client reads $response[0]->language
    fields = {
        "q": "<p>汤姆不会同意的。</p>",
        "format": "html",
        "source": "zh-Hans",
        "target": "en",
        "api_key": key,
    }
    html = requests.post(f"{door.url}/translate", files={n: (None, v) for n, v in fields.items()}, timeout=20)
    assert html.status_code == 200, html.text[:300]
    translated = html.json()["translatedText"]
    assert translated.startswith("<p>") and translated.endswith("</p>") and len(translated) > len("<p></p>")


def test_a_keyless_front_door_serves_no_key_per_address_and_still_refuses_a_wrong_key(
    shared_fleet: Fleet, tmp_path: Path
) -> None:
    """`serving.fleet run --keyless` (SECURITY.md): no key is served on both APIs, rate-limited per
    address; a key that is sent must still be valid; /frontend/settings says no key is required."""
    limits = {"rate_per_second": 1, "burst": 3, "probe_timeout_s": 2, "probe_window_s": 3}
    with front_door(tmp_path / "keyless", [replica_port(shared_fleet)], keyless=True, **limits) as made:
        door, key = made
        door.wait_healthy()
        assert requests.get(f"{door.url}/frontend/settings", timeout=30).json()["keyRequired"] is False
        keyless = post(door, "/translate", json={"q": "你好。", **PAIR})
        assert keyless.status_code == 200 and isinstance(keyless.json()["translatedText"], str), keyless.text
        native = requests.post(f"{door.url}/predictions/zh_en", json={"text": "你好。"}, timeout=60)
        assert native.status_code == 200 and native.json()["translation"], native.text
        wrong = "zhen_" + "x" * 43
        assert_error(post(door, "/translate", json={"q": "你好", **PAIR, "api_key": wrong}), 403, INVALID_KEY)
        assert (
            requests.post(
                f"{door.url}/predictions/zh_en", json={"text": "你好"}, headers=bearer(wrong), timeout=30
            ).status_code
            == 401
        )
        assert post(door, "/translate", json={"q": "你好。", **PAIR, "api_key": key}).status_code == 200
        statuses = [post(door, "/detect", json={"q": "你好"}).status_code for _ in range(8)]
        assert 429 in statuses and set(statuses) <= {200, 429}, statuses  # 1/s and 3 at once per address


def test_the_keyed_front_door_says_a_key_is_required(door: FrontDoor) -> None:
    assert requests.get(f"{door.url}/frontend/settings", timeout=30).json()["keyRequired"] is True
    assert_error(post(door, "/translate", json={"q": "你好", **PAIR}), 400, MISSING_KEY)
