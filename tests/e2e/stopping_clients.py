"""Closed-loop clients for the stop tests: each keeps one request in flight until told to stop sending.

Every request is four different test-set sentences at beam 4: nothing comes from the sentence cache,
and on the tiny stand-in a request lasts long enough that a stop finds some mid-batch.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import requests

from archive.tatoeba import read_blocks
from tests.waiting import wait_until

SOURCES = [block.source for block in read_blocks()]


@dataclass(frozen=True)
class Outcome:
    started: float
    ended: float
    status: int | str  # the HTTP status, or the name of the exception


@dataclass
class Clients:
    """Stop sending new requests when told, as a load balancer that saw the health check fail would."""

    url: str  # .../predictions/zh_en
    key: str | None
    # Resend once a request that got no answer at all: nginx closes idle keep-alive connections the
    # moment it quits, and a request written to one then is never read (deploy/FLEET.md).
    resend_unanswered: bool = False
    stop_sending: threading.Event = field(default_factory=threading.Event)
    outcomes: list[Outcome] = field(default_factory=list)
    resent: int = 0

    def run(self, count: int) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._client, daemon=True) for _ in range(count)]
        for thread in threads:
            thread.start()
        return threads

    def wait_answered(self, count: int, timeout: float = 120.0) -> None:
        """Until `count` requests have ended (so every client is past its first, slow, request and
        sending the next), at most `timeout` seconds."""
        wait_until(
            lambda: len(self.outcomes) >= count, timeout, lambda: f"{len(self.outcomes)} of {count} answered"
        )

    def in_flight_at(self, moment: float) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.started < moment < outcome.ended]

    def failed(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.status != 200]

    def _client(self) -> None:
        session = requests.Session()
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        while not self.stop_sending.is_set():
            body = {"text": "".join(random.sample(SOURCES, 4)), "num_beams": 4}
            started = time.monotonic()
            status = self._send(session, body, headers)
            if status == "ConnectionError" and self.resend_unanswered:
                self.resent += 1
                session = requests.Session()  # a new connection
                status = self._send(session, body, headers)
            self.outcomes.append(Outcome(started, time.monotonic(), status))

    def _send(self, session: requests.Session, body: dict[str, object], headers: dict[str, str]) -> int | str:
        try:
            return session.post(self.url, json=body, headers=headers, timeout=60).status_code
        except requests.RequestException as error:
            return type(error).__name__
