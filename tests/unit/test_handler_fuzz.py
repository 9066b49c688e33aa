"""Hostile input, generated: whatever arrives, every request of a batch gets a 2xx translation or a 4xx,
and the batch is answered in bounded time.

Bodies are shaped the way TorchServe hands them over: parsed JSON, str for text/*, bytes otherwise.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from handlers.wire.envelope import Envelope
from handlers.wire.envelopes import read_body
from handlers.wire.errors import InvalidRequest
from handlers.wire.native import Native
from handlers.zh_en_handler import TranslationHandler
from tests.adversarial import cases
from tests.examples import examples
from tests.handler_context import make_context

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Any code point, control characters and lone surrogates (a JSON escape like "\ud800" carries one) included.
hostile_text = st.text(st.characters(), max_size=60) | st.sampled_from(
    ["\x00\x01\x02", "\ud800你好", "\u200b\u200b", "\ufeff你好", "你" * 1001, "\n\t\r", "🙂" * 50, "a" * 3000]
)
small_options = st.dictionaries(
    st.sampled_from(["num_beams", "max_new_tokens", "min_new_tokens"]),
    st.integers(min_value=-3, max_value=12) | json_scalars,
    max_size=3,
)

# The worst cases by pattern shape (tests/adversarial.py), each in its own format: random strings
# almost never hold 40 tags in a row or an unclosed front matter of CRLF lines.
adversarial = st.sampled_from(cases(600)).map(
    lambda case: {"text": case.text, "format": "text" if case.entry == "libretranslate" else case.entry}
)
well_formed = st.builds(
    lambda text, options: {"text": text, **options},
    hostile_text | st.lists(hostile_text, max_size=6),
    small_options,
) | st.builds(lambda body, options: {**body, **options}, adversarial, small_options)
bodies = st.one_of(
    well_formed,
    json_values,
    hostile_text,
    st.binary(max_size=200),
    st.builds(lambda value: json.dumps(value).encode(), json_values),
    st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(1, 5000).map(lambda depth: b'{"text": ' * depth),
)
items = bodies.map(lambda body: {"body": body}) | st.just({"nothing": "here"})
# A success in each protocol's own shape: native, KServe v1 and v2, LibreTranslate.
SUCCESS_KEYS = ("translation", "translations", "predictions", "outputs", "translatedText")


def envelope_of(item: dict[str, Any]) -> Envelope:
    """The protocol a request speaks; one that cannot be read at all is answered natively."""
    try:
        return read_body(item)[0]
    except InvalidRequest:
        return Native()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(batch=[{"body": {"inputs": None}}])  # a KServe v2 error: {"error": ...}, not ours (CI, stop 51)
@given(batch=st.lists(items, min_size=1, max_size=4))
def test_any_batch_gets_one_2xx_or_4xx_per_request(
    fuzz_handler: TranslationHandler, tiny_model_dir: Path, batch: list[dict[str, Any]]
) -> None:
    context = make_context(tiny_model_dir, "int8", len(batch))
    start = time.perf_counter()
    responses = fuzz_handler.handle(batch, context)
    # Text stages take milliseconds, the tiny model little more: seconds mean a slow pattern again.
    assert time.perf_counter() - start < 10.0
    assert len(responses) == len(batch)
    for index, response in enumerate(responses):
        status = context.get_response_status(index)[0]
        json.dumps(response)
        if status == 200:
            assert any(key in response for key in SUCCESS_KEYS), response
            continue
        assert 400 <= status < 500, (status, response)
        # Each protocol's error shape: ours names code, type and message; KServe's and
        # LibreTranslate's carry the message as "error".
        if isinstance(envelope_of(batch[index]), Native):
            assert response["code"] == status and response["type"] and response["message"], response
        else:
            assert set(response) == {"error"} and response["error"], response
