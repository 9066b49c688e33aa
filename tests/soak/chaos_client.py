"""The chaos soak's clients (tests.soak.chaos): one kind of client in a thread of its own, sending
until stopped, and every request it sent recorded with its outcome as the client saw it.

What each outcome means, and when a request is resent, is in tests.soak.chaos's docstring.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests

from serving.client import StreamCut, StreamRefused, read_stream
from tests.soak.fleet_faults import TEXTS
from tests.soak.steady_load import unanswered

OUTCOMES = ("answered", "error", "reset", "lost")
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Record:
    """One request as its client saw it."""

    kind: str
    started: float  # monotonic seconds
    ended: float
    outcome: str  # one of OUTCOMES
    status: int  # 0 when no HTTP status came back
    detail: str  # the error's type, or what went wrong; "" when answered
    resent: bool
    body: dict[str, Any]  # what was sent
    translation: str | None  # what came back, when answered


def texts(label: str, count: int) -> Iterator[list[str]]:
    """Groups of `count` new sentences: the mark sits before each sentence's final punctuation."""
    for n in itertools.count(step=count):
        group = [TEXTS[(n + i) % len(TEXTS)] for i in range(count)]
        yield [f"{text[:-1]}{label}{n + i}{text[-1]}" for i, text in enumerate(group)]


class BrokeBeforeALine(requests.ConnectionError):
    """A stream whose connection broke after its head and before its first line."""


# What _ask returns: (HTTP status, outcome, detail, translation); requests' errors when the
# connection broke.
Asked = tuple[int, str, str, str | None]


class Client:
    """One kind of client in a thread of its own, sending until stopped."""

    def __init__(self, kind: str, url: str, key: str, options: dict[str, int], label: str) -> None:
        self.kind, self.url, self.key, self.options = kind, url, key, options
        self.texts = texts(label, 1 if kind == "interactive" else 2 if kind == "libretranslate" else 4)
        self.records: list[Record] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT_S + 10)

    def _run(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            self.records.append(self.send(session, self.request(next(self.texts))))

    def request(self, group: list[str]) -> dict[str, Any]:
        if self.kind == "libretranslate":
            return {"q": group, "source": "zh", "target": "en", "api_key": self.key}
        body: dict[str, Any] = {"text": "".join(group), **self.options}
        return {**body, "stream": True} if self.kind == "streamed" else body

    def send(self, session: requests.Session, body: dict[str, Any]) -> Record:
        started = time.monotonic()
        resent = False
        try:
            try:
                asked = self._ask(session, body)
            except requests.ConnectionError as error:
                if not (unanswered(error) or isinstance(error, BrokeBeforeALine)):
                    raise
                resent = True
                asked = self._ask(requests.Session(), body)  # on a new connection: the old one is gone
        except requests.RequestException as error:
            asked = (0, "lost", str(error)[:160], None)
        status, outcome, detail, translation = asked
        ended = time.monotonic()
        return Record(self.kind, started, ended, outcome, status, detail, resent, body, translation)

    def _ask(self, session: requests.Session, body: dict[str, Any]) -> Asked:
        route = "/translate" if self.kind == "libretranslate" else "/predictions/zh_en"
        headers = {} if self.kind == "libretranslate" else {"Authorization": f"Bearer {self.key}"}
        stream = self.kind == "streamed"
        url = f"{self.url}{route}"
        response = session.post(url, json=body, headers=headers, timeout=TIMEOUT_S, stream=stream)
        if response.status_code >= 400:
            error = _json(response.text)
            named = error.get("type") or error.get("error")
            return response.status_code, "error" if named else "lost", str(named or response.text[:80]), None
        if stream:
            return self._read_stream(response)
        answer = _json(response.text)
        translation = answer.get("translatedText" if self.kind == "libretranslate" else "translation")
        if isinstance(translation, list):
            translation = "\n".join(str(item) for item in translation)
        if response.status_code == 200 and isinstance(translation, str) and translation:
            return 200, "answered", "", translation
        return response.status_code, "lost", f"no translation: {response.text[:80]}", None

    def _read_stream(self, response: requests.Response) -> Asked:
        """Through serving.client's reader, so the soak holds it to every way a stream is cut."""
        lines: list[dict[str, Any]] = []
        try:
            lines.extend(read_stream(response))
        except StreamRefused as refused:
            return 200, "error", f"refused after {len(lines)} lines: {refused}", None
        except StreamCut as cut:
            if cut.by == "broke" and not lines:  # only its head came: no sentence was used, so resend
                raise BrokeBeforeALine(str(cut)) from cut
            if cut.by == "broke":
                return 200, "reset", f"after {len(lines)} lines: {cut}"[:160], None
            if cut.by == "cut_line":
                return 200, "error", f"StreamCut after {cut.sentences} lines", None
            return 200, "lost", f"{cut}"[:160], None
        return 200, "answered", "", str(lines[-1]["translation"])


def _json(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
