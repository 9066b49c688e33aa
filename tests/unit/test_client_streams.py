"""serving.client's stream reader against a real HTTP server that ends streams every way a dead
process, nginx or a refusal can: a caller gets each sentence, then either the whole response or an
exception that says why; never a cut stream taken for a whole one (issue 43)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from serving.client import Endpoints, StreamCut, StreamRefused, TorchServeClient

SENTENCES = [{"sentence": 0, "translation": "One."}, {"sentence": 1, "translation": "Two."}]
WHOLE = {"translation": "One. Two.", "stats": {"sentences": 2}}
CUT_LINE = {"code": 502, "type": "StreamCut", "message": "the replica died; send the request again"}
REFUSAL = {"code": 422, "type": "TooCostly", "message": "the text is too costly to process"}


def lines(*parts: object) -> bytes:
    return b"".join(json.dumps(part).encode() + b"\n" for part in parts)


# What each model name answers: the chunks of a 200 stream, and whether the connection then breaks
# mid-chunk (a chunk promised and never sent, as when the process holding the socket dies).
STREAMS: dict[str, tuple[list[bytes], bool]] = {
    "whole": ([lines(SENTENCES[0]), lines(SENTENCES[1]), lines(WHOLE)], False),
    "cut_line": ([lines(*SENTENCES), lines(CUT_LINE)], False),
    "refused": ([lines(SENTENCES[0]), lines(REFUSAL)], False),
    "ended_early": ([lines(*SENTENCES)], False),
    "ended_mid_line": ([lines(SENTENCES[0]), lines(WHOLE)[:-9]], False),
    "not_an_object": ([lines(SENTENCES[0]), b"[1, 2]\n"], False),
    "broke": ([lines(SENTENCES[0])], True),
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        name = self.path.rsplit("/", 1)[-1]
        if name == "busy":
            body = json.dumps({"code": 503, "type": "ServiceUnavailable", "message": "busy"}).encode()
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        chunks, breaks = STREAMS[name]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        if breaks:
            self.wfile.write(b"400\r\n" + lines(SENTENCES[1])[:5])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def client() -> Iterator[TorchServeClient]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield TorchServeClient(Endpoints(inference=f"http://127.0.0.1:{server.server_port}"), timeout=10)
    finally:
        server.shutdown()
        server.server_close()


def test_a_whole_stream_gives_each_sentence_then_the_whole_response(client: TorchServeClient) -> None:
    assert list(client.translate_stream("一。二。", model="whole")) == [*SENTENCES, WHOLE]


@pytest.mark.parametrize(
    ("name", "sentences", "by", "why"),
    [
        ("cut_line", 2, "cut_line", "send the request again"),
        ("ended_early", 2, "ended", "ended without the whole response"),
        ("ended_mid_line", 1, "malformed", "not JSON"),
        ("not_an_object", 1, "malformed", "not an object"),
        ("broke", 1, "broke", "connection broke"),
    ],
)
def test_a_stream_cut_any_way_raises_after_the_sentences_that_came(
    client: TorchServeClient, name: str, sentences: int, by: str, why: str
) -> None:
    received = []
    with pytest.raises(StreamCut, match=why) as raised:
        for line in client.translate_stream("一。二。", model=name):
            received.append(line)
    assert received == SENTENCES[:sentences]
    assert (raised.value.sentences, raised.value.by) == (sentences, by)


def test_an_error_line_at_the_end_is_a_refusal_not_a_cut(client: TorchServeClient) -> None:
    received = []
    with pytest.raises(StreamRefused, match="TooCostly") as raised:
        for line in client.translate_stream("一。二。", model="refused"):
            received.append(line)
    assert received == SENTENCES[:1] and (raised.value.code, raised.value.type) == (422, "TooCostly")


def test_a_request_refused_before_its_stream_raises_the_http_error(client: TorchServeClient) -> None:
    with pytest.raises(requests.HTTPError, match="503"):
        list(client.translate_stream("一。", model="busy"))
