"""KServe's v1 protocol (POST /v1/models/<model>:predict): {"instances": [...]} in, "predictions" out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from handlers.wire.envelope import Envelope
from handlers.wire.errors import InvalidRequest
from handlers.wire.kserve import ProtocolError, only_keys, request_parameters

V1_REQUEST_KEYS = ("instances", "parameters")


@dataclass(frozen=True)
class KServeV1(Envelope):
    name: ClassVar[str] = "v1"

    @classmethod
    def detect(cls, payload: Any) -> Self | None:
        return cls() if isinstance(payload, dict) and "instances" in payload else None

    def unwrap(self, payload: Any) -> dict[str, Any]:
        only_keys(payload, V1_REQUEST_KEYS, "v1 predict request")
        instances = payload["instances"]
        if not isinstance(instances, list) or not instances:
            raise ProtocolError('"instances" must be a non-empty list of texts, like {"instances": ["你好"]}')
        texts = [_text_of_instance(index, instance) for index, instance in enumerate(instances)]
        return {"text": texts, **request_parameters(payload)}

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Always "translations": v1 sends lists. v1 has only "predictions"; our identity (the
        stand-in notice above all) travels beside it."""
        rest = {key: value for key, value in body.items() if key != "translations"}
        return {"predictions": body["translations"], **rest}

    def error_body(self, error: InvalidRequest) -> dict[str, Any]:
        return {"error": error.message}


def _text_of_instance(index: int, instance: Any) -> str:
    # TF Serving's row format names an input per instance: {"text": "..."} is the same as "...".
    if isinstance(instance, dict) and set(instance) == {"text"}:
        instance = instance["text"]
    if not isinstance(instance, str):
        raise ProtocolError(f'instances[{index}] must be a string or {{"text": "..."}}')
    return instance
