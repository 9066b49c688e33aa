"""Every envelope the handler speaks, in detection order, and reading a request into one of them.

The one place that knows them all: a new protocol is one new module (an Envelope) and one entry
here. The front door's LibreTranslate route field wins over anything else the body holds, and
Native takes whatever no other envelope claims, so it comes last.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handlers.wire import parsing
from handlers.wire.envelope import Envelope
from handlers.wire.kserve_v1 import KServeV1
from handlers.wire.kserve_v2 import KServeV2
from handlers.wire.libretranslate import LibreTranslate
from handlers.wire.native import Native

ENVELOPES: tuple[type[Envelope], ...] = (LibreTranslate, KServeV2, KServeV1, Native)


def read_body(item: Mapping[str, Any]) -> tuple[Envelope, Any]:
    """The envelope one request of a batch came in, and its decoded body (not yet validated).

    An error here (no body, not UTF-8, not JSON) is answered natively: no envelope is known yet."""
    for kind in ENVELOPES:
        form = kind.read_form(item)
        if form is not None:
            return form
    payload = parsing.decode_body(item)
    return detect(payload), payload


def detect(payload: Any) -> Envelope:
    """The envelope of a decoded body: the first in ENVELOPES that claims it (Native takes any)."""
    for kind in ENVELOPES:
        envelope = kind.detect(payload)
        if envelope is not None:
            return envelope
    raise LookupError("no envelope claims the body: the last of ENVELOPES must take any body")
