"""A small REST client for TorchServe's inference and management APIs, token-aware.

Keys are re-read from key_file.json on every call: TorchServe rewrites the file
when a key is renewed, and a long-running client must pick that up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import requests

from serving.unix_http import mount

MODEL_NAME = "zh_en"


class ServerError(RuntimeError):
    """A management call failed; carries TorchServe's status and message."""


# How a stream was cut: the front door's StreamCut line, a connection that broke, a body that
# ended without the whole response, or a line that is not a JSON object.
CutBy = Literal["cut_line", "broke", "ended", "malformed"]


class StreamCut(RuntimeError):
    """A streamed answer that ended before its whole response (docs/API.md, "Big documents and
    streaming"). The sentences yielded before it are complete; send the request again for the
    rest. `sentences` is how many came, `by` how it was cut."""

    def __init__(self, by: CutBy, why: str, sentences: int) -> None:
        super().__init__(f"the stream was cut after {sentences} sentences: {why}; send the request again")
        self.by, self.sentences = by, sentences


class StreamRefused(RuntimeError):
    """A stream whose last line is an error body: a refusal found after its 200 went out (a text too
    costly to rebuild, for one). Sending it again gives the same refusal."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')} {error.get('type')}: {error.get('message')}")
        self.code, self.type = error.get("code"), error.get("type")


def read_stream(response: requests.Response) -> Iterator[dict[str, Any]]:
    """A streamed answer's lines as they come: each sentence's, then the whole response (the line
    with `translation` and `stats`). Anything else that ends it raises StreamCut, or StreamRefused for
    an error line, so a caller never takes a cut stream for a whole one. A request refused before its
    stream began (4xx/5xx) raises requests.HTTPError."""
    response.raise_for_status()
    sentences = 0
    try:
        for raw in response.iter_lines():
            if not raw:
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                raise StreamCut("malformed", f"a line that is not JSON ({raw[:60]!r})", sentences) from None
            if not isinstance(line, dict):
                raise StreamCut("malformed", f"a line that is not an object ({raw[:60]!r})", sentences)
            if line.get("type") == "StreamCut":
                raise StreamCut(
                    "cut_line", str(line.get("message", "the front door's StreamCut line")), sentences
                )
            if "translation" not in line and {"code", "type", "message"} <= line.keys():
                raise StreamRefused(line)
            yield line
            if "stats" in line and "translation" in line:
                return
            sentences += 1
    except requests.RequestException as error:  # the connection broke mid-body
        raise StreamCut("broke", f"the connection broke ({type(error).__name__})", sentences) from error
    raise StreamCut("ended", "the body ended without the whole response", sentences)


@dataclass(frozen=True)
class Endpoints:
    inference: str = "http://127.0.0.1:8080"
    management: str = "http://127.0.0.1:8081"
    metrics: str = "http://127.0.0.1:8082"


def read_key(key_file: Path | None, kind: str) -> str | None:
    """The `kind` key ('inference', 'management' or 'API') from key_file.json, or None without token auth."""
    if key_file is None or not key_file.exists():
        return None
    return str(json.loads(key_file.read_text())[kind]["key"])


class TorchServeClient:
    def __init__(self, endpoints: Endpoints, key_file: Path | None = None, timeout: float = 120.0) -> None:
        self.endpoints = endpoints
        self.key_file = key_file
        self.timeout = timeout
        # http+unix:// URLs too: a fleet replica's management API is a unix socket (serving.unix_http).
        self.session = mount(requests.Session())

    def _headers(self, kind: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        key = read_key(self.key_file, kind)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return {**headers, **(extra or {})}

    # Inference API
    def ping(self) -> requests.Response:
        return self.session.get(
            f"{self.endpoints.inference}/ping", headers=self._headers("inference"), timeout=self.timeout
        )

    def translate(
        self, text: str | list[str], model: str = MODEL_NAME, version: str | None = None, **options: object
    ) -> requests.Response:
        return self.post_raw(
            json.dumps({"text": text, **options}).encode(), "application/json", model, version
        )

    def translate_stream(
        self, text: str | list[str], model: str = MODEL_NAME, version: str | None = None, **options: object
    ) -> Iterator[dict[str, Any]]:
        """`"stream": true`: each sentence's line as it is decoded, then the whole response; read_stream's
        StreamCut if the stream ends any other way."""
        body = json.dumps({"text": text, **options, "stream": True}).encode()
        yield from read_stream(self.post_raw(body, "application/json", model, version, stream=True))

    def post_raw(
        self,
        body: bytes,
        content_type: str | None,
        model: str = MODEL_NAME,
        version: str | None = None,
        stream: bool = False,
    ) -> requests.Response:
        path = f"/predictions/{model}" + (f"/{version}" if version else "")
        headers = self._headers("inference", {"Content-Type": content_type} if content_type else None)
        return self.session.post(
            f"{self.endpoints.inference}{path}",
            data=body,
            headers=headers,
            timeout=self.timeout,
            stream=stream,
        )

    # Management API
    def _manage(self, method: str, path: str, **params: Any) -> Any:
        response = self.session.request(
            method,
            f"{self.endpoints.management}{path}",
            params=params or None,
            headers=self._headers("management"),
            timeout=self.timeout,
        )
        if response.status_code >= 400:
            raise ServerError(f"{method} {path} -> {response.status_code}: {response.text.strip()[:300]}")
        return response.json()

    def register(self, mar: str, initial_workers: int | None = None) -> Any:
        params: dict[str, Any] = {"url": mar, "synchronous": "true"}
        if initial_workers is not None:
            params["initial_workers"] = initial_workers
        return self._manage("POST", "/models", **params)

    def models(self) -> list[str]:
        return [entry["modelName"] for entry in self._manage("GET", "/models")["models"]]

    def describe(self, model: str = MODEL_NAME, version: str = "all") -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._manage("GET", f"/models/{model}/{version}")
        return result

    def versions(self, model: str = MODEL_NAME) -> list[str]:
        try:
            return [entry["modelVersion"] for entry in self.describe(model)]
        except ServerError as error:
            if "404" in str(error):
                return []
            raise

    def default_version(self, model: str = MODEL_NAME) -> str:
        return str(self._manage("GET", f"/models/{model}")[0]["modelVersion"])

    def set_default(self, version: str, model: str = MODEL_NAME) -> Any:
        return self._manage("PUT", f"/models/{model}/{version}/set-default")

    def scale(self, version: str, workers: int, model: str = MODEL_NAME) -> Any:
        return self._manage(
            "PUT", f"/models/{model}/{version}", min_worker=workers, max_worker=workers, synchronous="true"
        )

    def unregister(self, version: str, model: str = MODEL_NAME) -> Any:
        return self._manage("DELETE", f"/models/{model}/{version}")

    def workers(self, version: str, model: str = MODEL_NAME) -> int:
        """Workers the version has, READY or not (a synchronous register answers before READY)."""
        return len(self.describe(model, version)[0].get("workers", []))

    def ready_workers(self, version: str, model: str = MODEL_NAME) -> int:
        workers = self.describe(model, version)[0].get("workers", [])
        return sum(1 for worker in workers if worker.get("status") == "READY")

    def wait_ready(
        self, version: str, workers: int = 1, model: str = MODEL_NAME, timeout: float = 300.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while self.ready_workers(version, model) < workers:
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{model} {version}: fewer than {workers} READY workers after {timeout:.0f}s"
                )
            time.sleep(0.5)
