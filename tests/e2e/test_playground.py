"""The playground (GET /) and the status page (GET /status) in a real browser, through a real front door.

Headless Chromium from Debian's `chromium` package (`make chromium`), driven by Playwright's Python
package with `executable_path`, on a front door of its own over the session's one real replica
(tests/e2e/shared_fleet.py). Every page load fails the test on a Content-Security-Policy violation,
so an inline script or style would not pass. With PLAYGROUND_SCREENSHOTS=<dir> (`make screenshots`)
the glossary and status tests save playground.png and status.png there.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Page, expect, sync_playwright

from serving.fleet_keys import KeyStore
from serving.front_door import FrontDoor
from serving.nginx_conf import FrontDoorConfig, FrontDoorPaths
from serving.ports import free_port
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import Stub, bearer, front_door

pytestmark = pytest.mark.e2e
pytest_plugins = ["tests.e2e.shared_fleet"]  # shared_fleet: one replica for the session

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = os.environ.get("PLAYGROUND_SCREENSHOTS")
WRONG_KEY = "zhen_" + "x" * 43
SRT = (
    "1\n00:00:01,000 --> 00:00:03,000\n<i>汤姆不会同意的。</i>\n\n"
    "2\n00:00:04,500 --> 00:00:06,000\n他在公园里散步，\n天气很好。\n"
)


@dataclass(frozen=True)
class Site:
    url: str
    key: str
    door: FrontDoor
    metrics_port: int  # the replica's

    def translate(self, body: dict[str, object], key: str | None = None) -> requests.Response:
        return requests.post(
            f"{self.url}/predictions/zh_en", json=body, headers=bearer(key or self.key), timeout=60
        )


@pytest.fixture(scope="module")
def site(shared_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A front door of this module's own over the shared replica, its metrics port on the status page."""
    (spec,) = shared_fleet.state.replicas
    door = FrontDoor(
        FrontDoorPaths(tmp_path_factory.mktemp("playground-door")),
        FrontDoorConfig(listen=f"127.0.0.1:{free_port()}", rate_per_second=5, burst=20),
    )
    door.configure([spec.ports.inference], {spec.name: spec.ports.metrics})
    key = KeyStore(door.paths.keys).add("browser")
    door.start()
    try:
        yield Site(door.url, key, door, spec.ports.metrics)
    finally:
        door.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make chromium` (apt-get install chromium)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage); the test fails on any CSP violation it logs."""
    context = browser.new_context(viewport={"width": 1200, "height": 900}, accept_downloads=True)
    opened = context.new_page()
    console: list[str] = []
    opened.on("console", lambda message: console.append(message.text))
    yield opened
    context.close()
    violations = [line for line in console if "Content Security Policy" in line]
    assert not violations, violations


def open_with_key(page: Page, url: str, key: str) -> None:
    page.goto(url)
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Use this key").click()
    expect(page.locator("#key-state")).to_have_text("A key is set for this tab.")


def test_a_typed_sentence_translates_and_shows_the_standin_banner(page: Page, site: Site) -> None:
    open_with_key(page, f"{site.url}/", site.key)
    text = "汤姆不会同意的。"
    page.get_by_label("Chinese text").fill(text)
    with page.expect_request("**/predictions/zh_en") as sent:
        page.get_by_label("Chinese text").press("Control+Enter")  # the keyboard alone translates
    expect(page.get_by_label("English", exact=True)).not_to_have_value("")
    # The key travels in a header only, and the tab keeps it in sessionStorage.
    assert sent.value.headers["authorization"] == f"Bearer {site.key}"
    assert site.key not in sent.value.url and site.key not in page.url
    assert page.evaluate("sessionStorage.getItem('zh_en.api_key')") == site.key
    answer = site.translate({"text": text}).json()
    expect(page.get_by_label("English", exact=True)).to_have_value(answer["translation"])
    assert answer["standin"] is True
    expect(page.locator("#standin-banner")).to_be_visible()
    expect(page.locator("#standin-banner")).to_contain_text(answer["notice"])


def test_a_glossary_term_appears_in_the_result(page: Page, site: Site) -> None:
    open_with_key(page, f"{site.url}/", site.key)
    page.get_by_label("Chinese text").fill("他在公园里。")
    page.get_by_role("button", name="Add a term").click()
    page.get_by_label("Chinese term 1").fill("公园")
    page.get_by_label("English term 1").fill("the Royal Park")
    page.get_by_label("Beams").fill("4")
    page.get_by_label("Alternatives", exact=True).fill("2")
    page.get_by_role("button", name="Translate").click()
    expect(page.get_by_label("English", exact=True)).to_have_value(re.compile("the Royal Park"))
    choices = page.locator("#choice-list input[type=radio]")
    expect(choices.first).to_be_checked()
    assert choices.count() >= 2  # the best and at least one alternative, as choices
    choices.nth(1).check()
    picked = page.locator("#choice-list label").nth(1).inner_text().split(": ", 1)[1]
    expect(page.get_by_label("English", exact=True)).to_have_value(picked)
    choices.first.check()
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / "playground.png"), full_page=True)


def test_an_srt_file_round_trips_through_the_file_picker(page: Page, site: Site, tmp_path: Path) -> None:
    open_with_key(page, f"{site.url}/", site.key)
    page.get_by_label("Open a file").set_input_files(
        {"name": "clip.srt", "mimeType": "application/x-subrip", "buffer": SRT.encode()}
    )
    expect(page.get_by_label("Format", exact=True)).to_have_value("srt")
    expect(page.get_by_label("Chinese text")).to_have_value(SRT)
    page.get_by_role("button", name="Translate").click()
    expect(page.get_by_role("button", name="Download the result")).to_be_enabled()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the result").click()
    assert download.value.suggested_filename == "clip.en.srt"
    saved = tmp_path / "clip.en.srt"
    download.value.save_as(saved)
    got = saved.read_text(encoding="utf-8")
    assert got == site.translate({"text": SRT, "format": "srt"}).json()["translation"]
    # Cue numbers and timings come back byte for byte; the cues' text is the model's.
    kept = [line for line in SRT.splitlines() if "-->" in line or line.isdigit() or not line]
    assert [line for line in got.splitlines() if "-->" in line or line.isdigit() or not line] == kept


def test_a_streamed_document_shows_its_first_sentence_before_its_last_is_done(page: Page, site: Site) -> None:
    # Each sentence longer than the one before: the stand-in decodes each to its length cap (2 x its
    # tokens + 10), so the first finishes many steps before the last even when all share the batch.
    sentences = [f"第{number}句话" + "很长" * number + "。" for number in range(30)]
    open_with_key(page, f"{site.url}/", site.key)
    page.get_by_label("Chinese text").fill("".join(sentences))
    expect(page.get_by_label("Stream sentence by sentence")).to_be_checked()
    page.get_by_role("button", name="Translate").click()
    # Checked at every frame the browser paints: some frame shows a first sentence and no result yet.
    shown = page.wait_for_function(
        """() => {
            const items = document.querySelectorAll('#streamed li').length;
            return items > 0 && document.getElementById('result').value === '' ? items : false;
        }""",
        polling="raf",
        timeout=60_000,
    ).json_value()
    assert 0 < shown < len(sentences)
    expect(page.get_by_label("English", exact=True)).not_to_have_value("", timeout=60_000)
    expect(page.locator("#streamed li")).to_have_count(len(sentences))


def test_a_cut_stream_keeps_its_sentences_and_says_it_was_cut(page: Page, tmp_path: Path) -> None:
    """A replica that dies mid-stream (a stub here): the front door ends the stream with an error
    line (front_door.endCutStream), and the page keeps the sentences that came and shows the line."""
    lines = tuple(f'{{"sentence": {n}, "translation": "Sentence {n}."}}' for n in range(2))
    stub = Stub(200, stream_lines=lines, cut_off=True)
    try:
        with front_door(tmp_path, [stub.port]) as (door, key):
            open_with_key(page, f"{door.url}/", key)
            page.get_by_label("Chinese text").fill("第一句。第二句。第三句。")
            page.get_by_role("button", name="Translate").click()
            expect(page.get_by_role("alert")).to_contain_text("The replica answering this stream stopped")
            expect(page.locator("#streamed li")).to_have_text(["Sentence 0.", "Sentence 1."])
            expect(page.get_by_label("English", exact=True)).to_have_value("")
    finally:
        stub.close()


def test_a_wrong_key_shows_the_servers_message(page: Page, site: Site) -> None:
    open_with_key(page, f"{site.url}/", WRONG_KEY)
    page.get_by_label("Chinese text").fill("你好。")
    page.get_by_role("button", name="Translate").click()
    refused = site.translate({"text": "你好。"}, key=WRONG_KEY)
    assert refused.status_code == 401
    expect(page.get_by_role("alert")).to_have_text(f"Error 401: {refused.json()['message']}")
    expect(page.get_by_label("English", exact=True)).to_have_value("")


def test_the_status_page_draws_its_plots_from_live_metrics(page: Page, site: Site) -> None:
    open_with_key(page, f"{site.url}/status", site.key)
    expect(page.locator("figure.plot")).to_have_count(6)
    # Traffic between two readings: the next reading's requests/s and latency are above zero.
    for number in range(4):
        assert site.translate({"text": f"状态页第{number}次测试。", "num_beams": 1}).status_code == 200
    requests_legend = page.locator("#plot-requests .legend")
    expect(requests_legend).not_to_have_text("all replicas: 0.00/s", timeout=15_000)
    expect(requests_legend).not_to_have_text("all replicas: –")
    expect(page.locator("#plot-latency .legend")).to_contain_text("p95: ")
    expect(page.locator("#plot-latency .legend")).not_to_contain_text("p95: –")
    # Workers: the replica's WorkerLoadTime series, as its metrics port reports them right now.
    metrics = requests.get(f"http://127.0.0.1:{site.metrics_port}/metrics", timeout=30).text
    loaded = sum(line.startswith("WorkerLoadTime{") for line in metrics.splitlines())
    expect(page.locator("#plot-workers .legend")).to_have_text(f"r1: {loaded:.2f}")
    for plot in ("requests", "latency", "queue", "rows", "workers"):
        expect(page.locator(f"#plot-{plot} svg polyline").first).to_be_attached()
    if SCREENSHOTS:
        screenshot_traffic(site, seconds=20)  # readings under load, for plots with lines
        page.screenshot(path=str(Path(SCREENSHOTS) / "status.png"), full_page=True)


def screenshot_traffic(site: Site, seconds: float) -> None:
    """About 3 requests/s (under the key's 5/s): sentences seen before (cache hits), new ones, documents."""
    deadline = time.monotonic() + seconds
    number = 0
    while time.monotonic() < deadline:
        number += 1
        text = "".join(f"第{number}批第{line}句话。" for line in range(12)) if number % 4 == 0 else "你好。"
        assert site.translate({"text": text if number % 2 == 0 else f"新的句子{number}。"}).status_code == 200
        time.sleep(0.3)


def test_both_pages_fit_a_phone_and_work_from_the_keyboard(page: Page, site: Site) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/status", "/"):
        page.goto(f"{site.url}{path}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), path
    focused = "document.activeElement.id"
    while page.evaluate(focused) != "api-key":  # Tab from the top: the links, then the key
        page.keyboard.press("Tab")
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"  # visible focus
    page.keyboard.type(site.key)
    page.keyboard.press("Enter")
    expect(page.locator("#key-state")).to_have_text("A key is set for this tab.")
    while page.evaluate(focused) != "source":
        page.keyboard.press("Tab")
    page.keyboard.insert_text("你好。")
    page.keyboard.press("Control+Enter")
    expect(page.get_by_label("English", exact=True)).not_to_have_value("")
    if SCREENSHOTS:
        page.screenshot(path=str(Path(SCREENSHOTS) / "playground-phone.png"), full_page=True)


def test_the_pages_are_static_keyless_and_locked_down(site: Site) -> None:
    for path, kind in (
        ("/", "text/html"),
        ("/status", "text/html"),
        ("/site/playground.js", "application/javascript"),
        ("/site/site.css", "text/css"),
    ):
        response = requests.get(f"{site.url}{path}", timeout=30)
        assert response.status_code == 200, path
        assert response.headers["Content-Type"].startswith(kind)
        policy = response.headers["Content-Security-Policy"]
        for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'"):
            assert directive in policy
        assert "unsafe-inline" not in policy
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    page = requests.get(f"{site.url}/", timeout=30).text
    assert "<script>" not in page and "style=" not in page  # no inline script or style to allow
    for method, path in (
        ("POST", "/"),
        ("OPTIONS", "/"),
        ("GET", "/site/"),
        ("GET", "/site/../nginx/nginx.conf"),
        ("GET", "/site/key_file.json"),
        ("GET", "/index.html"),
        ("GET", "/_replica_metrics/8082"),
        ("POST", "/status/metrics"),
    ):
        response = requests.request(method, f"{site.url}{path}", headers=bearer(site.key), timeout=30)
        assert response.status_code == 404, (method, path, response.status_code)
        assert response.json()["type"] == "NotFound"


def test_the_status_route_has_the_apis_key_and_rate_limit(site: Site) -> None:
    url = f"{site.url}/status/metrics"
    for headers in ({}, bearer(WRONG_KEY)):
        refused = requests.get(url, headers=headers, timeout=30)
        assert refused.status_code == 401 and refused.json()["type"] == "Unauthorized"
    key = KeyStore(site.door.paths.keys).add("status-rate")
    site.door.reload()
    with requests.Session() as session:
        statuses = [session.get(url, headers=bearer(key), timeout=30) for _ in range(30)]
    first = statuses[0].json()
    assert [replica["name"] for replica in first["replicas"]] == ["r1"]
    # The replica's own Prometheus text, summed by hand: nothing translates meanwhile, so they agree.
    metrics = requests.get(f"http://127.0.0.1:{site.metrics_port}/metrics", timeout=30).text
    assert first["replicas"][0] == {
        "name": "r1",
        "up": True,
        "requests": prometheus_sum(metrics, "ts_inference_requests_total"),
        "cache_hits": prometheus_sum(metrics, "SentenceCacheHits"),
        "cache_misses": prometheus_sum(metrics, "SentenceCacheMisses"),
        "queued_sentences": prometheus_sum(metrics, "QueuedSentences"),
        "running_rows": prometheus_sum(metrics, "RunningRows"),
        "workers": sum(line.startswith("WorkerLoadTime{") for line in metrics.splitlines()),
    }
    assert first["replicas"][0]["requests"] > 0
    limited = [response for response in statuses if response.status_code == 429]
    assert limited, "30 requests at once passed a rate of 5/s with bursts of 20"
    assert limited[0].json()["type"] == "TooManyRequests"


def prometheus_sum(text: str, metric: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(metric + "{"))
