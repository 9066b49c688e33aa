"""The steady load's resend: only a request the server closed without any answer is sent again."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
import requests

from serving.client import Endpoints, TorchServeClient
from tests.soak.steady_load import SteadyLoad, unanswered

ANSWER = json.dumps({"translation": "hi", "variant": "int8"}).encode()


@pytest.fixture
def hangs_up() -> Iterator[tuple[str, list[int]]]:
    """A server on loopback that reads each request and hangs up, the first `hang_ups[0]` times;
    later requests get a 200."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    hang_ups = [1]

    def serve() -> None:
        for number in range(4):
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                if number >= hang_ups[0]:
                    connection.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                        + f"Content-Length: {len(ANSWER)}\r\n\r\n".encode()
                        + ANSWER
                    )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", hang_ups
    listener.close()


@pytest.mark.parametrize("resend", [True, False])
def test_a_request_closed_without_an_answer_is_resent_once_only_when_asked(
    hangs_up: tuple[str, list[int]], resend: bool
) -> None:
    endpoints = Endpoints(inference=hangs_up[0])
    load = SteadyLoad(endpoints, None, ["你好"], concurrency=1, resend_unanswered=resend)
    load._record(TorchServeClient(endpoints), "你好")
    (outcome,) = load.outcomes
    if resend:
        assert (outcome.status, outcome.error, outcome.resent) == (200, None, True)
        assert load.resent() == 1 and load.failures() == []
    else:
        assert outcome.status == 0 and "Connection aborted" in (outcome.error or "")
        assert load.failures() == [outcome]


def test_a_resend_that_gets_no_answer_either_is_a_failure(hangs_up: tuple[str, list[int]]) -> None:
    url, hang_ups = hangs_up
    hang_ups[0] = 2
    endpoints = Endpoints(inference=url)
    load = SteadyLoad(endpoints, None, ["你好"], concurrency=1, resend_unanswered=True)
    load._record(TorchServeClient(endpoints), "你好")
    (outcome,) = load.outcomes
    assert (outcome.status, outcome.resent) == (0, True) and load.failures() == [outcome]


def test_refused_connections_are_not_unanswered_requests() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(requests.ConnectionError) as refused:
            requests.post(f"http://127.0.0.1:{port}/", data=b"x", timeout=5)
    assert not unanswered(refused.value)
