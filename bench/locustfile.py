"""Locust user for zh_en: each request a Tatoeba sentence no earlier one sent, every response body checked.

Started by `python -m bench.load`, which writes the sentences (with their reference lengths) to a
JSON file and passes settings through ZH_EN_* environment variables.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, constant, constant_pacing, events, task

SENTENCES: list[dict[str, Any]] = json.loads(Path(os.environ["ZH_EN_SENTENCES"]).read_text())
PATH = os.environ.get("ZH_EN_PATH", "/predictions/zh_en")
KEY_FILE = os.environ.get("ZH_EN_KEY_FILE", "")
OPTIONS: dict[str, int] = json.loads(os.environ.get("ZH_EN_OPTIONS", "{}"))
# On the stand-in, force each output to its reference's token length so decode work is realistic.
FORCE_LENGTHS = os.environ.get("ZH_EN_FORCE_LENGTHS") == "1"
MAX_REQUESTS = int(os.environ.get("ZH_EN_MAX_REQUESTS", "0"))
# "libretranslate": LibreTranslate's POST /translate body and answer; its server forces the lengths.
LIBRETRANSLATE = os.environ.get("ZH_EN_API") == "libretranslate"
sent = 0
answered = 0  # responses of any kind, for bench.cpu_account's marks
MARKS = os.environ.get("ZH_EN_MARKS")


def _mark() -> None:
    """On SIGUSR1: the time and the responses so far, so bench.load knows the rate between two marks."""
    with open(MARKS or os.devnull, "a") as marks:
        marks.write(f"{time.time()} {answered}\n")


if MARKS:
    gevent.signal_handler(signal.SIGUSR1, _mark)
    Path(MARKS).write_text("ready\n")


def _headers() -> dict[str, str]:
    if not KEY_FILE or not Path(KEY_FILE).exists():
        return {}
    return {"Authorization": f"Bearer {json.loads(Path(KEY_FILE).read_text())['inference']['key']}"}


@events.test_start.add_listener  # type: ignore[untyped-decorator]  # locust ships no hints here
def _read_key(environment: Any, **_: Any) -> None:
    environment.zh_en_headers = _headers()


def _post(
    user: Any, body: dict[str, Any], required: tuple[str, ...], name: str = PATH
) -> dict[str, Any] | None:
    """One request, marked failed unless it answers 200 with a JSON object holding `required`."""
    global answered
    with user.client.post(
        PATH, json=body, headers=user.environment.zh_en_headers, name=name, catch_response=True
    ) as response:
        answered += 1
        if response.status_code != 200:
            response.failure(f"HTTP {response.status_code}: {(response.text or '')[:120]}")
            return None
        try:
            answer = response.json()
        except ValueError:
            response.failure("response is not JSON")
            return None
        if not isinstance(answer, dict) or not all(answer.get(key) for key in required):
            response.failure(f"response lacks {list(required)}")
            return None
        response.success()
        return answer


# Saturation: every user sends its next request at once; paced (bench.mixed's interactive users):
# one request every PACE_SECONDS per user, however long the last one took.
PACE_SECONDS = float(os.environ.get("ZH_EN_PACE_SECONDS", "0"))


class Translator(FastHttpUser):  # type: ignore[misc]
    wait_time = constant_pacing(PACE_SECONDS) if PACE_SECONDS else constant(0)

    @task  # type: ignore[untyped-decorator]
    def translate(self) -> None:
        global sent
        sent += 1
        if MAX_REQUESTS and sent > MAX_REQUESTS:
            self.environment.runner.quit()
            return
        # In the file's (seeded, shuffled) order, so no cache answers a repeat (bench.load).
        sentence = SENTENCES[(sent - 1) % len(SENTENCES)]
        if LIBRETRANSLATE:
            _post(
                self,
                {"q": sentence["source"], "source": "zh", "target": "en", "format": "text"},
                ("translatedText",),
            )
            return
        body: dict[str, Any] = {"text": sentence["source"], **OPTIONS}
        if FORCE_LENGTHS:
            body["min_new_tokens"] = body["max_new_tokens"] = sentence["tokens"]
        _post(self, body, ("translation",))


# bench.mixed: besides the single-sentence users, DOCUMENT_USERS users send paragraphs of
# DOCUMENT_SENTENCES random sentences (stats under the name "document"; on the stand-in every
# sentence of a paragraph is forced to the paragraph's mean reference length).
if DOCUMENT_USERS := int(os.environ.get("ZH_EN_DOCUMENT_USERS", "0")):
    DOCUMENT_SENTENCES = int(os.environ.get("ZH_EN_DOCUMENT_SENTENCES", "40"))

    class DocumentTranslator(FastHttpUser):  # type: ignore[misc]
        wait_time = constant(0)
        fixed_count = DOCUMENT_USERS

        @task  # type: ignore[untyped-decorator]
        def translate(self) -> None:
            picked = random.sample(SENTENCES, DOCUMENT_SENTENCES)
            body: dict[str, Any] = {"text": "".join(s["source"] for s in picked), **OPTIONS}
            if FORCE_LENGTHS:
                tokens = round(sum(s["tokens"] for s in picked) / len(picked))
                body["min_new_tokens"] = body["max_new_tokens"] = tokens
            _post(self, body, ("translation",), name="document")
