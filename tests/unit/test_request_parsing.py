from __future__ import annotations

import pytest

from handlers.handler_config import HandlerConfig, TorchServeBatching
from handlers.model.options import GenerationOptions
from handlers.translation.request import TranslationRequest
from handlers.wire.envelopes import read_body
from handlers.wire.errors import InvalidRequest

CONFIG = HandlerConfig(max_texts_per_request=3, max_chars_per_text=20, max_new_tokens=50)


def parse_item(item: dict[str, object]) -> TranslationRequest:
    envelope, payload = read_body(item)
    return envelope.parse(payload, CONFIG)


def parse(body: object) -> object:
    return parse_item({"body": body})


def test_plain_text_is_one_text() -> None:
    request = parse("你好。")
    assert request.texts == ("你好。",) and not request.as_list  # type: ignore[attr-defined]


def test_json_string_and_list() -> None:
    assert parse({"text": "你好"}).texts == ("你好",)  # type: ignore[attr-defined]
    request = parse({"text": ["一", "二"], "num_beams": 2, "max_new_tokens": 5, "min_new_tokens": 5})
    assert request.texts == ("一", "二") and request.as_list  # type: ignore[attr-defined]
    assert request.options == GenerationOptions(2, 5, 5)  # type: ignore[attr-defined]


def test_bytes_are_decoded_as_text_or_json() -> None:
    assert parse("你好".encode()).texts == ("你好",)  # type: ignore[attr-defined]
    assert parse(b'{"text": ["a"]}').as_list  # type: ignore[attr-defined]


def test_data_key_is_accepted_like_body() -> None:
    assert parse_item({"data": "你好"}).texts == ("你好",)


def expect_error(body: object, status: int, *fragments: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    assert caught.value.status == status
    for fragment in fragments:
        assert fragment in caught.value.message


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ("", 400, "empty"),
        ("  \n\t", 400, "empty"),
        ({"text": " "}, 400, "empty"),
        ({"text": ["ok", ""]}, 400, "text 1 is empty"),
        ({"text": "好\ud800"}, 400, "lone UTF-16 surrogate ('\\ud800') at character 1"),
        (b"\xff\xfe\x00", 400, "not valid UTF-8"),
        (b'{"text": ', 400, "not valid JSON"),
        ([1, 2], 400, "must be an object"),
        ({"txt": "a"}, 400, "unknown field"),
        ({}, 400, 'missing field "text"'),
        ({"text": 5}, 400, "string or a list"),
        ({"text": []}, 400, "empty list"),
        ({"text": ["a", 3]}, 400, "item 1"),
        ({"text": {"nested": {"deeper": 1}}}, 400, "string or a list"),
        ({"text": ["a"] * 4}, 413, "max_texts_per_request (3)"),
        ({"text": "长" * 21}, 413, "max_chars_per_text (20)"),
        ({"text": "a", "num_beams": 0}, 422, "num_beams"),
        ({"text": "a", "num_beams": 99}, 422, "num_beams"),
        ({"text": "a", "num_beams": "4"}, 400, "integer"),
        ({"text": "a", "num_beams": True}, 400, "integer"),
        ({"text": "a", "max_new_tokens": 51}, 422, "max_new_tokens"),
        ({"text": "a", "min_new_tokens": -1}, 422, "min_new_tokens"),
        ({"text": "a", "max_new_tokens": 5, "min_new_tokens": 6}, 422, "min_new_tokens"),
    ],
)
def test_bad_input_names_the_problem(body: object, status: int, fragment: str) -> None:
    expect_error(body, status, fragment)


def test_form_post_without_body_gets_415_with_the_fix() -> None:
    with pytest.raises(InvalidRequest) as caught:
        read_body({"汤姆": ""})
    assert caught.value.status == 415 and "Content-Type" in caught.value.message


@pytest.mark.parametrize("batching", ["static", "continuous"])
def test_alternatives_parse_under_every_batching_and_streaming_needs_continuous(
    batching: TorchServeBatching,
) -> None:
    config = HandlerConfig(torchserve_batching=batching)
    envelope, payload = read_body({"body": {"text": "你好", "alternatives": 2}})
    assert envelope.parse(payload, config).options.alternatives == 2
    streamed = {"text": "你好", "stream": True}
    if batching == "continuous":
        assert envelope.parse(streamed, config).stream
        return
    with pytest.raises(InvalidRequest) as caught:
        envelope.parse(streamed, config)
    assert (
        caught.value.status == 400
        and "needs a model version served with torchserve_batching: continuous" in caught.value.message
    )
