"""A bounded, steady stream of translation requests from a few threads, recording every outcome.

Locust measures throughput; this measures what an operator action (a version swap, a killed
worker) does to the requests around it: which failed, when, and which variant answered.
Localhost only, bounded by the caller's duration.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import requests

from serving.client import Endpoints, TorchServeClient

LOOPBACK_PREFIXES = ("http://127.0.0.1:", "http://localhost:")


@dataclass(frozen=True)
class Outcome:
    started: float  # monotonic seconds
    seconds: float
    status: int  # 0 when no HTTP response came back
    variant: str | None
    error: str | None
    resent: bool = False  # sent again after the first try got no answer (resend_unanswered)


@dataclass
class SteadyLoad:
    """`with SteadyLoad(endpoints, key_file, texts) as load: ...` keeps `concurrency` requests in flight."""

    endpoints: Endpoints
    key_file: Path | None
    texts: list[str]
    concurrency: int = 4
    max_requests: int = 100_000
    options: dict[str, int] = field(default_factory=dict)
    # A reverse proxy that reloads (nginx) closes its idle keep-alive connections at once; a request
    # written to one at that instant is never read and gets no answer at all. A translation is
    # idempotent, so a client may send it again: with this on, such a request is resent once, on a
    # new connection, and its outcome says so. Any other error, or a second one, is a failure.
    resend_unanswered: bool = False
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.endpoints.inference.startswith(LOOPBACK_PREFIXES):
            raise ValueError(f"steady load only targets this machine, not {self.endpoints.inference}")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(self.concurrency)
        ]

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)

    def _run(self, worker: int) -> None:
        client = TorchServeClient(self.endpoints, self.key_file, timeout=120.0)
        sent = 0
        while not self._stop.is_set() and len(self.outcomes) < self.max_requests:
            text = self.texts[(worker + sent * self.concurrency) % len(self.texts)]
            sent += 1
            self._record(client, text)

    def _record(self, client: TorchServeClient, text: str) -> None:
        started = time.monotonic()
        resent = False
        try:
            body_out = json.dumps({"text": text, **self.options}).encode()
            try:
                response = client.post_raw(body_out, "application/json")
            except requests.ConnectionError as error:
                if not (self.resend_unanswered and unanswered(error)):
                    raise
                resent = True
                response = client.post_raw(body_out, "application/json")
            body = (
                response.json()
                if response.headers.get("content-type", "").startswith("application/json")
                else {}
            )
            ok = response.status_code == 200 and bool(body.get("translation"))
            outcome = Outcome(
                started,
                time.monotonic() - started,
                response.status_code,
                body.get("variant"),
                None if ok else response.text[:200],
                resent,
            )
        except requests.RequestException as error:
            outcome = Outcome(started, time.monotonic() - started, 0, None, str(error)[:200], resent)
        with self._lock:
            self.outcomes.append(outcome)

    def wait_for_answers(self, count: int, since: float, timeout: float = 120.0) -> None:
        """Block until `count` requests started at or after `since` (monotonic) were answered."""
        deadline = time.monotonic() + timeout
        while self.answered_since(since) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.answered_since(since)} of {count} answers within {timeout:.0f} s")
            time.sleep(0.05)

    def answered_since(self, since: float) -> int:
        with self._lock:
            return sum(1 for o in self.outcomes if o.error is None and o.started >= since)

    # Summaries
    def failures(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.error is not None]

    def resent(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.resent)

    def variants(self) -> Counter[str | None]:
        return Counter(outcome.variant for outcome in self.outcomes if outcome.error is None)

    def variant_sequence(self) -> list[str]:
        """Answering variants in request order with repeats collapsed: int8, fp32, int8, ..."""
        sequence: list[str] = []
        for outcome in sorted(self.outcomes, key=lambda o: o.started):
            if outcome.variant and (not sequence or sequence[-1] != outcome.variant):
                sequence.append(outcome.variant)
        return sequence


def unanswered(error: BaseException) -> bool:
    """The server closed the connection before any byte of an answer: urllib3's "Connection
    aborted." around RemoteDisconnected or a reset, not an error in the middle of a response."""
    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        item = pending.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (http.client.RemoteDisconnected, ConnectionResetError)):
            return True
        pending += [*item.args, item.__cause__, item.__context__]
    return False
