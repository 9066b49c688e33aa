"""What every request envelope (native, KServe v1 and v2, LibreTranslate) knows about its protocol.

TorchServe hands the handler the body but not the route, so an envelope is read from the body
itself. An instance is one request's envelope: it keeps what the answer must carry back (the v2
request id, LibreTranslate's route and detected languages). `parse` unwraps the body into the
native request shape, then every protocol goes through the one native validation
(handlers.wire.parsing); `answer`, `error_body` and `status` put the native answer back into the
protocol's shape. handlers.wire.envelopes lists them all, in detection order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from handlers.handler_config import HandlerConfig
from handlers.translation.request import TranslationRequest
from handlers.wire import parsing
from handlers.wire.errors import InvalidRequest

# A response body: an object, or a list (LibreTranslate's /detect).
ResponseBody = dict[str, Any] | list[dict[str, Any]]


class Envelope(ABC):
    """One protocol: its detection, parsing, answer and error shapes; an instance is one request's."""

    name: ClassVar[str]  # as logs and tests call it: "native", "v1", "v2", "libretranslate"

    @classmethod
    @abstractmethod
    def detect(cls, payload: Any) -> Self | None:
        """This envelope for a decoded body that speaks the protocol, else None; never raises
        (`parse` validates)."""

    @classmethod
    def read_form(cls, item: Mapping[str, Any]) -> tuple[Self, dict[str, Any]] | None:
        """This envelope and the fields of a request posted as a form (TorchServe hands its
        fields over as the request's keys), else None: most protocols take no forms."""
        return None

    @abstractmethod
    def unwrap(self, payload: Any) -> Any:
        """The native payload ({"text": ..., **options}) this body asks for; raise InvalidRequest
        naming what does not follow the protocol."""

    def parse(self, payload: Any, config: HandlerConfig) -> TranslationRequest:
        """Unwrap, then validate once in the native shape; raise InvalidRequest naming the problem."""
        return parsing.native_request(self.unwrap(payload), config)

    def answer_at_once(self, payload: Any, config: HandlerConfig) -> ResponseBody | None:
        """The answer to a request that needs no model (LibreTranslate's /detect), else None."""
        return None

    @abstractmethod
    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A native success body (with the handler's identity fields) in the protocol's shape."""

    @abstractmethod
    def error_body(self, error: InvalidRequest) -> dict[str, Any]:
        """A client error in the protocol's shape."""

    def status(self, status: int) -> int:
        """The HTTP status an error gets in the protocol (most keep ours)."""
        return status
