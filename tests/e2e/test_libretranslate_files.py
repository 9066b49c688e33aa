"""LibreTranslate's /translate_file and /download_file at the front door, through real nginx to the
session's tiny replica, with plain HTTP and the real libretranslate-aio client: each text format
round trips, a download is its client's alone and expires, and every refusal is LibreTranslate's
400 {"error": ...}. The stand-in's words are noise: a download is checked against the native
route's translation of the same text and format, never its wording.
"""

from __future__ import annotations

import base64
import io
import re
import time
from pathlib import Path
from typing import Any

import docx
import pytest
import requests
from libretranslate_aio import LibreTranslate
from libretranslate_aio.exceptions import ForbiddenError
from odf import teletype
from odf.opendocument import load
from odf.text import P, Span

from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import front_door, replica_port
from tests.unit.test_office import odt_file, word_file

pytestmark = pytest.mark.e2e
pytest_plugins = ["tests.e2e.shared_fleet", "tests.e2e.libretranslate_door"]  # the replica; door and key

PAIR = {"source": "zh", "target": "en"}
SRT = (
    "1\n00:00:01,000 --> 00:00:03,000\n<i>汤姆不会同意的。</i>\n\n"
    "2\n00:00:04,500 --> 00:00:06,000\n我要看病。\n"
)
# name -> (the native route's format, the file's text)
FILES = {
    "notes.txt": ("text", "汤姆不会同意的。\n我要看病。\n"),
    "page.html": ("html", "<p>汤姆<b>不会</b>同意的。</p>\n<p>我要看病。</p>\n"),
    "clip.srt": ("srt", SRT),
    "cues.vtt": ("vtt", "WEBVTT\n\n00:01.000 --> 00:03.000\n汤姆不会同意的。\n"),
    "readme.md": ("markdown", "# 标题\n\n汤姆**不会**同意的。\n"),
}


def translate_file(door: FrontDoor, key: str, name: str, content: bytes, **fields: str) -> requests.Response:
    form = {**PAIR, "api_key": key, **fields}
    return requests.post(f"{door.url}/translate_file", files={"file": (name, content)}, data=form, timeout=60)


def native(door: FrontDoor, key: str, text: str, text_format: str) -> str:
    answer = requests.post(
        f"{door.url}/predictions/zh_en",
        json={"text": text, "format": text_format},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["translation"])


def download_url(response: requests.Response) -> str:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"translatedFileUrl"}, body
    return str(body["translatedFileUrl"])


def assert_error(response: requests.Response, status: int, message: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error"} and message in body["error"], body


@pytest.mark.parametrize("name", FILES)
def test_a_file_comes_back_translated_in_its_own_format(door: FrontDoor, key: str, name: str) -> None:
    text_format, text = FILES[name]
    url = download_url(translate_file(door, key, name, text.encode()))
    assert url.startswith(f"{door.url}/download_file/") and url.endswith(f".{name}")
    got = requests.get(url, params={"api_key": key}, timeout=30)
    assert got.status_code == 200, got.text
    assert got.headers["content-disposition"] == f'attachment; filename="{name}"'
    assert got.headers["cache-control"] == "no-store"
    assert got.content.decode() == native(door, key, text, text_format)
    # The bearer token names the client as well as api_key does.
    assert requests.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30).content == got.content


def test_a_download_is_its_clients_alone(door: FrontDoor, key: str) -> None:
    url = download_url(translate_file(door, key, "notes.txt", "我要看病。".encode()))
    other = KeyStore(door.paths.keys).add("another-client")
    door.reload()
    # Another client's key, however valid, finds nothing; so does a name or id changed by one letter.
    assert_error(requests.get(url, params={"api_key": other}, timeout=30), 404, "Not Found")
    assert_error(requests.get(url[:-4] + ".md", params={"api_key": key}, timeout=30), 404, "Not Found")
    flipped = url.replace(
        "/download_file/", "/download_file/0" if "/download_file/1" in url else "/download_file/1"
    )
    assert_error(requests.get(flipped, params={"api_key": key}, timeout=30), 404, "Not Found")
    assert_error(requests.get(url, timeout=30), 400, "API key")
    assert_error(
        requests.get(url, params={"api_key": "zhen_" + "x" * 43}, timeout=30), 403, "Invalid API key"
    )
    assert_error(requests.post(url, params={"api_key": key}, timeout=30), 405, "GET")


def test_refusals_are_libretranslates(door: FrontDoor, key: str) -> None:
    text = "我要看病。".encode()
    cases = [
        (translate_file(door, key, "notes.pdf", text), "file format not supported"),
        (translate_file(door, key, "notes", text), "file format not supported"),
        (translate_file(door, key, "notes.txt", "我要看病。".encode("gbk")), "not UTF-8"),
        (translate_file(door, key, "notes.txt", text, target="fr"), "fr is not supported"),
        (translate_file(door, key, "notes.txt", text, source="ja"), "ja is not supported"),
        (translate_file(door, key, "notes.txt", b""), "empty"),
        (translate_file(door, key, "", text), "empty file"),
        (
            requests.post(f"{door.url}/translate_file", data={**PAIR, "api_key": key}, timeout=30),
            "missing file",
        ),
        (
            requests.post(
                f"{door.url}/translate_file", files={"file": ("a.txt", text)}, data={"api_key": key}
            ),
            "missing source",
        ),
    ]
    for response, message in cases:
        assert_error(response, 400, message)
    assert_error(translate_file(door, "", "notes.txt", text), 400, "API key")


def test_codes_as_clients_send_them_and_a_bom_are_accepted(door: FrontDoor, key: str) -> None:
    text = "汤姆不会同意的。\n"
    url = download_url(
        translate_file(door, key, "Notes Á.TXT", "\ufeff".encode() + text.encode(), source="zh-CN")
    )
    assert url.endswith(".Notes_.TXT"), url  # the name as werkzeug's secure_filename would make it
    assert requests.get(url, params={"api_key": key}, timeout=30).text == native(door, key, text, "text")


def test_downloads_expire_and_are_bounded(shared_fleet: Fleet, tmp_path: Path) -> None:
    port = replica_port(shared_fleet)
    with front_door(tmp_path, [port], download_ttl_s=1, downloads_kept=1) as (door, key):
        first = download_url(translate_file(door, key, "a.txt", "我要看病。".encode()))
        full = translate_file(door, key, "b.txt", "汤姆不会同意的。".encode())
        assert_error(full, 503, "try again later")
        assert full.headers["retry-after"] == "60"
        time.sleep(1.5)
        assert_error(requests.get(first, params={"api_key": key}, timeout=30), 404, "Not Found")
        # The expired one is removed at the next upload, which makes room.
        download_url(translate_file(door, key, "b.txt", "汤姆不会同意的。".encode()))
        assert len(list((door.paths.worker_dir / "downloads").iterdir())) == 2  # one file, its record


HAN = re.compile("[\u4e00-\u9fff]")


def test_a_word_file_comes_back_translated_with_its_structure(door: FrontDoor, key: str) -> None:
    sent = word_file()  # made once: python-docx stamps each entry with the time (2 s resolution)
    url = download_url(translate_file(door, key, "report.docx", sent))
    got = requests.get(url, params={"api_key": key}, timeout=30)
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/vnd.openxml")
    back = docx.Document(io.BytesIO(got.content))
    style = back.paragraphs[0].style
    assert style is not None and style.name == "Heading 1"
    assert [run.bold for run in back.paragraphs[1].runs] == [None, True, None]
    assert back.paragraphs[2].text == "English only, kept as it is."
    assert back.tables[0].rows[0].cells[1].text == "42"
    assert not any(HAN.search(p.text) for p in back.paragraphs)
    # The native route answers the same file, as base64.
    native_answer = requests.post(
        f"{door.url}/predictions/zh_en",
        json={"text": base64.b64encode(sent).decode(), "format": "docx"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert native_answer.status_code == 200, native_answer.text
    assert base64.b64decode(native_answer.json()["translation"]) == got.content


def test_an_odt_comes_back_translated_with_its_structure(door: FrontDoor, key: str) -> None:
    url = download_url(translate_file(door, key, "report.odt", odt_file()))
    got = requests.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert got.headers["content-type"] == "application/vnd.oasis.opendocument.text"
    back = load(io.BytesIO(got.content))
    texts = [teletype.extractText(p) for p in back.getElementsByType(P)]
    assert "English only, kept as it is." in texts and "42" in texts
    assert [span.getAttribute("stylename") for span in back.getElementsByType(Span)] == ["Bold"]
    assert not any(HAN.search(text) for text in texts)


def test_a_broken_office_file_is_refused_as_libretranslate_would(door: FrontDoor, key: str) -> None:
    assert_error(translate_file(door, key, "report.docx", b"PK not a zip"), 400, "not a .docx file")
    assert_error(translate_file(door, key, "report.odt", word_file()), 400, "not a .odt file")


def test_libretranslate_aio_translates_a_word_file_and_reads_the_servers_settings(
    door: FrontDoor, key: str, tmp_path: Path
) -> None:
    """The real libretranslate-aio client (PyPI), as its users call it: translate_file with a path,
    then the link it answers fetched with the key; detect, languages, settings, health and suggest."""
    report = tmp_path / "report.docx"
    report.write_bytes(word_file())
    with LibreTranslate(door.url, api_key=key) as client:
        result = client.translate_file(report, "zh", "en")
        assert result.translated_file_url.startswith(f"{door.url}/download_file/")
        got = requests.get(result.translated_file_url, params={"api_key": key}, timeout=30)
        assert got.status_code == 200, got.text
        assert [run.bold for run in docx.Document(io.BytesIO(got.content)).paragraphs[1].runs] == [
            None,
            True,
            None,
        ]
        assert client.translate("汤姆不会同意的。", "zh", "en").translated_text
        best = client.detect("汤姆不会同意的。")[0]
        assert (best.language, best.confidence) == ("zh-Hans", 100.0)
        assert "zh-Hans" in {language.code for language in client.languages()}
        settings = client.frontend_settings()
        assert settings.key_required and settings.char_limit == 5000
        assert {".docx", ".odt"} <= set(settings.supported_files_format)
        assert client.health()
        with pytest.raises(ForbiddenError, match="Suggestions are disabled"):
            client.suggest("你好", "hello", "zh", "en")
    # LibreTranslate's links work for anyone who has them; ours only with the key that sent the file.
    assert requests.get(result.translated_file_url, timeout=30).status_code == 400
