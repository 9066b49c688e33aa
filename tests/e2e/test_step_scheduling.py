"""The one decode path under both ways TorchServe calls the worker, on real TorchServe:
torchserve_batching: continuous (the shipped continuousBatching layout) against
torchserve_batching: static (TorchServe batches, each decoded to its end): plain, with
alternatives, streamed, refused, concurrent, and streamed through the nginx front door.

Both tiny int8 archives run with the sentence cache off; every step answer is compared with what
the static archive gives.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from bench.common import archive_with
from serving.processes import process_alive, wait_gone
from serving.torchserve import TorchServe
from tests.e2e.conftest_fleet import Loopback, QuietHandler, front_door
from tests.waiting import wait_until

STEP = {"torchserve_batching": "continuous", "sentence_cache_entries": 0, "threads": 1, "step_partitions": 2}
DOCUMENT = "。".join(f"第{n}个句子说明了一件事情" for n in range(1, 13)) + "。"
QUICK = {"num_beams": 1, "max_new_tokens": 12}


STATIC = {"torchserve_batching": "static", "sentence_cache_entries": 0, "threads": 1}
STATIC_LAYOUT = {"continuousBatching": False, "minWorkers": 2, "maxWorkers": 2, "batchSize": 16}


pytestmark = pytest.mark.long(seconds=55)  # seconds: make test starts the longest first


@pytest.fixture(scope="module")
def static_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServe]:
    workdir = tmp_path_factory.mktemp("static")
    store, mar = archive_with("int8", tiny_model_dir, workdir, STATIC, STATIC_LAYOUT)
    with TorchServe(store, workdir / "torchserve", models=[mar]) as running:
        yield running


@pytest.fixture(scope="module")
def step_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchServe]:
    workdir = tmp_path_factory.mktemp("step")
    top = {"continuousBatching": True, "minWorkers": 1, "maxWorkers": 1}
    store, mar = archive_with("int8", tiny_model_dir, workdir, STEP, top)
    with TorchServe(store, workdir / "torchserve", models=[mar]) as running:
        # /ping answers before the worker has loaded: a module's first test would time the load.
        running.client.wait_ready(running.client.default_version(), workers=1)
        yield running


def without_cache_flags(answer: object) -> object:
    """The answer minus `stats` and every `cached`: each static worker keeps its own sentence cache
    and TorchServe picks the worker, so whether a sentence was a hit is not the scheduler's doing."""
    if isinstance(answer, dict):
        return {
            key: without_cache_flags(value) for key, value in answer.items() if key not in ("stats", "cached")
        }
    if isinstance(answer, list):
        return [without_cache_flags(item) for item in answer]
    return answer


def stream(server: TorchServe, body: dict[str, object]) -> tuple[requests.Response, list[bytes]]:
    client = server.client
    response = client.session.post(
        f"{client.endpoints.inference}/predictions/zh_en",
        data=json.dumps(body).encode(),
        headers=client._headers("inference", {"Content-Type": "application/json"}),
        timeout=60,
        stream=True,
    )
    return response, list(response.iter_lines())


def test_a_plain_request_gets_the_static_schedulers_answer(
    step_server: TorchServe, static_server: TorchServe
) -> None:
    for body in (
        {"text": "你好，世界。", **QUICK},
        {"text": [DOCUMENT, "谢谢"], "sentences": True},
        {"text": ["你好，世界。", "谢谢"], "num_beams": 4, "alternatives": 2},
    ):
        text = str(body["text"])
        step = step_server.client.translate(**body)  # type: ignore[arg-type]
        static = static_server.client.translate(**body)  # type: ignore[arg-type]
        assert step.status_code == 200, step.text
        assert step.headers["Content-Type"].startswith("application/json")
        assert without_cache_flags(step.json()) == without_cache_flags(static.json()), text


def test_a_streamed_document_sends_each_sentence_then_the_whole_response(
    step_server: TorchServe, static_server: TorchServe
) -> None:
    response, lines = stream(step_server, {"text": DOCUMENT, "stream": True, "sentences": True})
    assert response.status_code == 200 and response.headers["Content-Type"] == "application/x-ndjson"
    assert response.headers.get("Transfer-Encoding") == "chunked"
    *sentences, last = [json.loads(line) for line in lines if line]
    whole = static_server.client.translate(DOCUMENT, sentences=True).json()
    assert without_cache_flags(last) == without_cache_flags(whole)
    assert [line["sentence"] for line in sentences] == list(range(12))
    assert [line["translation"] for line in sentences] == [pair["translation"] for pair in whole["sentences"]]


def test_streamed_sentences_read_as_the_answer_does_glossary_terms_and_protected_spans_restored(
    step_server: TorchServe, static_server: TorchServe
) -> None:
    body = {
        "text": "<p>我们在公园里。</p><p>请访问 https://example.com/a?b=1 了解 2,048 个公园。</p>",
        "format": "html",
        "glossary": {"公园": "the Royal Park"},
        "sentences": True,
    }
    response, lines = stream(step_server, {**body, "stream": True})
    assert response.status_code == 200
    *sentences, last = [json.loads(line) for line in lines if line]
    whole = static_server.client.post_raw(json.dumps(body).encode(), "application/json").json()
    streamed = [line["translation"] for line in sentences]
    assert streamed == [pair["translation"] for pair in whole["sentences"]]
    assert all("the Royal Park" in text for text in streamed)
    assert "https://example.com/a?b=1" in streamed[1]
    assert without_cache_flags(last) == without_cache_flags(whole)


def test_refusals_keep_their_status_and_body(step_server: TorchServe, static_server: TorchServe) -> None:
    for body in (b'{"txt": "x"}', b'{"text": 5}', json.dumps({"text": "你好", "num_beams": 99}).encode()):
        step = step_server.client.post_raw(body, "application/json")
        static = static_server.client.post_raw(body, "application/json")
        assert step.status_code == static.status_code and 400 <= step.status_code < 500, step.text
        assert step.json() == static.json()
    refused = static_server.client.translate("你好", stream=True)
    assert refused.status_code == 400 and "torchserve_batching: continuous" in refused.json()["message"]


def test_concurrent_singles_and_documents_all_come_back_right(step_server: TorchServe) -> None:
    texts = [f"第{n}天我们去了公园。" for n in range(24)] + [DOCUMENT] * 4
    alone = {text: step_server.client.translate(text).json()["translation"] for text in set(texts)}
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda text: step_server.client.translate(text), texts))
    assert [a.status_code for a in answers] == [200] * len(texts)
    assert [a.json()["translation"] for a in answers] == [alone[text] for text in texts]


class GatedStream:
    """An upstream on a free loopback port that streams ndjson the way the step worker does
    (chunked, `X-Accel-Buffering: no`) but sends its second line only once the client has read
    the first: if anything between them holds the first line back, the stream never completes."""

    def __init__(self) -> None:
        self.first_line_read = threading.Event()
        gate = self.first_line_read

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("X-Accel-Buffering", "no")
                self.end_headers()
                self._chunk(b'{"sentence": 0, "translation": "first"}\n')
                gate.wait(timeout=20)
                self._chunk(b'{"translation": "whole"}\n')
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.loopback = Loopback(Handler)

    @property
    def port(self) -> int:
        return self.loopback.port

    def close(self) -> None:
        self.first_line_read.set()
        self.loopback.close()


def test_the_step_worker_asks_proxies_not_to_buffer_its_stream(step_server: TorchServe) -> None:
    response, _ = stream(step_server, {"text": DOCUMENT, "stream": True})
    assert response.status_code == 200 and response.headers.get("X-Accel-Buffering") == "no"


def test_a_stream_passes_the_front_door_unbuffered(tmp_path: Path) -> None:
    upstream = GatedStream()
    try:
        with front_door(tmp_path / "door", [upstream.port]) as (door, key):
            response = requests.post(
                f"{door.url}/predictions/zh_en",
                json={"text": DOCUMENT, "stream": True},
                headers={"Authorization": f"Bearer {key}"},
                stream=True,
                timeout=10,
            )
            assert response.status_code == 200 and response.headers["Content-Type"] == "application/x-ndjson"
            lines = response.iter_lines()
            first = next(lines)  # times out (10 s) if nginx holds it until the upstream finishes
            upstream.first_line_read.set()
            assert json.loads(first) == {"sentence": 0, "translation": "first"}
            assert [json.loads(line) for line in lines if line] == [{"translation": "whole"}]
    finally:
        upstream.close()


def test_the_scheduler_reports_queue_rows_and_time_to_first_sentence(step_server: TorchServe) -> None:
    def reported() -> set[str]:
        metrics = requests.get(f"{step_server.client.endpoints.metrics}/metrics", timeout=30).text
        names = ("QueuedSentences", "RunningRows", "TimeToFirstSentence")
        return {
            name for name in names if re.search(rf'^{name}\{{Variant="int8".*\}} [0-9.]+$', metrics, re.M)
        }

    assert step_server.client.translate(DOCUMENT).status_code == 200
    expected = {"QueuedSentences", "RunningRows", "TimeToFirstSentence"}
    # The frontend reads worker metrics from their log stream.
    wait_until(lambda: reported() == expected, 30, lambda: f"reported {reported()}", 0.5)


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(child) for child in out.split() if process_alive(int(child))]


def test_a_killed_partition_is_replaced_and_partitions_die_with_their_worker(step_server: TorchServe) -> None:
    """Runs last in this module: it costs the worker. A partition that dies is replaced by the
    worker (which keeps answering); a worker that dies takes its partitions with it, and
    TorchServe starts a new one with its own."""
    (worker,) = step_server.worker_pids()
    partitions = children(worker)
    assert len(partitions) == STEP["step_partitions"], f"worker {worker} has children {partitions}"
    os.kill(partitions[0], signal.SIGKILL)

    def replacements() -> list[int]:
        now = children(worker)
        return now if len(now) == len(partitions) and partitions[0] not in now else []

    replaced = wait_until(
        replacements,
        30,
        lambda: f"worker {worker}'s partitions {children(worker)}, {partitions[0]} killed",
        0.1,
    )
    assert step_server.worker_pids() == [worker], "the worker outlives its partition"
    assert step_server.client.translate(DOCUMENT, sentences=True).status_code == 200

    os.kill(worker, signal.SIGKILL)
    assert wait_gone([worker, *replaced], timeout=30) == [], "a partition outlived its worker"
    wait_until(
        lambda: step_server.worker_pids() and step_server.client.translate("你好，世界。").status_code == 200,
        120,
        "a new worker answering",
        1.0,
    )
    (new_worker,) = step_server.worker_pids()
    assert new_worker != worker and len(children(new_worker)) == STEP["step_partitions"]
    assert step_server.client.translate(DOCUMENT, sentences=True).status_code == 200


@pytest.mark.timed  # a 5 s bound per answer: run alone
def test_answered_requests_do_not_pile_up_on_a_keep_alive_connection(step_server: TorchServe) -> None:
    """TorchServe resends a continuous-batching request until its last chunk says so or its
    connection closes: more answers than a call may hold (batchSize 64 in the shipped yaml) over one
    keep-alive session must each come back, and quickly."""
    client = step_server.client
    for number in range(80):
        started = time.monotonic()
        response = client.translate(f"第{number}句。", num_beams=1, max_new_tokens=4)
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 5.0, f"request {number} waited: the worker holds stale requests"
    refused = client.post_raw(b'{"txt": "x"}', "application/json")
    assert refused.status_code == 400
    assert client.translate("你好", num_beams=1, max_new_tokens=4).status_code == 200
