"""What the two KServe envelopes (v1, and v2: the Open Inference Protocol) share: how they refuse a
body that does not follow the protocol, and how options travel in "parameters"."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from handlers.wire.errors import InvalidRequest
from handlers.wire.parsing import PROTOCOL_KEYS


class ProtocolError(InvalidRequest):
    """A v1/v2 body that does not follow the protocol; the message names the problem (a 400)."""


def request_parameters(payload: Mapping[str, Any], ignore: Collection[str] = ()) -> dict[str, Any]:
    """The native options a request's "parameters" carry (PROTOCOL_KEYS; `ignore` steers the transport)."""
    parameters = payload.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(f'"parameters" must be an object, got {type(parameters).__name__}')
    options = {key: value for key, value in parameters.items() if key not in ignore}
    unknown = sorted(set(options) - set(PROTOCOL_KEYS))
    if unknown:
        raise ProtocolError(
            f"unknown parameter(s) {unknown}; allowed parameters: {sorted(PROTOCOL_KEYS)}"[:400]
        )
    return options


def only_keys(mapping: Mapping[str, Any], allowed: Collection[str], what: str) -> None:
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise ProtocolError(
            f"unknown field(s) {unknown[:10]} in the {what}; allowed fields: {list(allowed)}"[:400]
        )
