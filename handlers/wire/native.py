"""Our own API (POST /predictions/<model>): a JSON request or plain text in, our JSON out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from handlers.wire.envelope import Envelope
from handlers.wire.errors import InvalidRequest


@dataclass(frozen=True)
class Native(Envelope):
    """The body is the native request itself; the last envelope tried, it takes any body."""

    name: ClassVar[str] = "native"

    @classmethod
    def detect(cls, payload: Any) -> Self | None:
        return cls()

    def unwrap(self, payload: Any) -> Any:
        return payload

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return dict(body)

    def error_body(self, error: InvalidRequest) -> dict[str, Any]:
        return {"code": error.status, "type": error.kind, "message": error.message}
