"""LibreTranslate's envelope: its bodies and forms in, its answers, errors and statuses out.

The front door (deploy/nginx/libretranslate.conf) hands the handler LibreTranslate requests as JSON
or as a multipart form whose fields TorchServe passes as separate keys (bytes), with the route in
the field "libretranslate"; tests/e2e/test_libretranslate.py drives the whole path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from handlers.handler_config import HandlerConfig
from handlers.wire import libretranslate
from handlers.wire.envelopes import detect, read_body
from handlers.wire.errors import InvalidRequest
from handlers.wire.kserve_v2 import KServeV2
from handlers.wire.libretranslate import LibreTranslate
from handlers.zh_en_handler import TranslationHandler
from tests.handler_context import initialized_handler, make_context

REPO = Path(__file__).resolve().parents[2]
CONFIG = HandlerConfig(max_texts_per_request=3, max_chars_per_text=20, max_new_tokens=50)
TRANSLATE = LibreTranslate("translate")
IDENTITY = {"model": "zh_en", "version": "1.0-int8", "variant": "int8", "decoder": "fast", "standin": False}


def lt(**fields: Any) -> dict[str, Any]:
    return {"q": "你好", "source": "zh", "target": "en", **fields}


def form_item(route: str | None = "translate", **fields: str) -> dict[str, Any]:
    """A request as TorchServe hands over a form the front door passed on: one bytes value per key."""
    item: dict[str, Any] = {name: value.encode() for name, value in fields.items()}
    if route is not None:
        item["libretranslate"] = route.encode()
    return item


def test_the_body_or_the_front_door_names_libretranslate() -> None:
    assert detect(lt()) == TRANSLATE  # a JSON body with "q", on any route
    assert detect(lt(libretranslate="translate")) == TRANSLATE
    detecting = LibreTranslate("detect")
    assert detect({"q": "你好", "libretranslate": "detect"}) == detecting
    # The front door's route field wins over what else the body holds.
    assert detect({"inputs": [], "libretranslate": "detect"}) == detecting
    assert detect({"text": "你好"}).name == "native"
    envelope, fields = read_body(form_item(q="你好", source="zh", target="en"))
    assert envelope == LibreTranslate("translate", form=True)
    assert fields == {"q": "你好", "source": "zh", "target": "en", "libretranslate": "translate"}
    assert read_body(form_item(None, q="你好"))[0].name == "libretranslate"  # a form with q, straight in
    envelope, payload = read_body({"body": json.dumps(lt(libretranslate="translate")).encode()})
    assert envelope == TRANSLATE and payload == lt(libretranslate="translate")


def test_a_form_that_is_not_libretranslate_is_still_a_415() -> None:
    # curl -d 'text' without a content type sends a form whose only field is named by the text.
    with pytest.raises(InvalidRequest) as caught:
        read_body({"你好": b""})
    assert caught.value.status == 415


@pytest.mark.parametrize(
    ("fields", "native"),
    [
        (lt(), {"text": "你好", "format": "text"}),
        (lt(q=["一", "二"], format="html"), {"text": ["一", "二"], "format": "html"}),
        (lt(source="zh-Hans", target="EN"), {"text": "你好", "format": "text"}),
        (lt(source="zt"), {"text": "你好", "format": "text"}),
        (lt(source="ZH-hant"), {"text": "你好", "format": "text"}),
        (lt(source="auto"), {"text": "你好", "format": "text"}),
        (lt(alternatives=2), {"text": "你好", "format": "text", "alternatives": 2}),
        (lt(alternatives="3"), {"text": "你好", "format": "text", "alternatives": 3}),
        (lt(alternatives=-4), {"text": "你好", "format": "text"}),  # LibreTranslate: max(0, n)
        (lt(format="", api_key="k", extra=1), {"text": "你好", "format": "text"}),  # ignored, as there
    ],
)
def test_translate_unwraps_to_the_native_request(fields: dict[str, Any], native: dict[str, Any]) -> None:
    assert LibreTranslate().unwrap(fields) == native


def test_a_form_gets_its_line_breaks_normalised_as_libretranslate_does() -> None:
    envelope, fields = read_body(form_item(q="一。\r\n二。\r三。\n", source="zh", target="en"))
    assert envelope.parse(fields, CONFIG).texts == ("一。\n二。\n三。",)
    assert LibreTranslate().unwrap(lt(q="一。\r\n二。"))["text"] == "一。\r\n二。"  # JSON: as sent


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"source": "zh", "target": "en"}, "Invalid request: missing q parameter"),
        (lt(q=""), "Invalid request: missing q parameter"),
        (lt(q=[]), "Invalid request: missing q parameter"),
        (lt(source=None), "Invalid request: missing source parameter"),
        ({"q": "你好", "source": "zh"}, "Invalid request: missing target parameter"),
        (lt(alternatives="two"), "Invalid request: alternatives parameter is not a number"),
        (lt(source="fr"), "fr is not supported"),
        (lt(target="de"), "de is not supported"),
        (lt(format="markdown"), "markdown format is not supported"),
        (lt(target="zh"), "Chinese (zh-Hans) is not available as a target language from Chinese (zh-Hans)"),
        (lt(source="en"), "English (en) is not available as a target language from English (en)"),
        (["你好"], "Invalid JSON format"),
    ],
)
def test_translate_refuses_in_libretranslate_words(fields: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        TRANSLATE.parse(fields, CONFIG)
    assert caught.value.status == 400 and caught.value.message == message


def test_native_limits_apply_and_answer_400_as_libretranslate_does() -> None:
    with pytest.raises(InvalidRequest) as caught:
        TRANSLATE.parse(lt(q=["一", "二", "三", "四"]), CONFIG)
    assert caught.value.status == 413 and "max_texts_per_request (3)" in caught.value.message
    assert TRANSLATE.status(413) == TRANSLATE.status(422) == 400
    assert TRANSLATE.status(503) == 503 and KServeV2().status(413) == 413
    assert TRANSLATE.error_body(InvalidRequest("bad")) == {"error": "bad"}


def test_answers_in_libretranslate_shape() -> None:
    one = {"translation": "Hello.", "warnings": [], **IDENTITY}
    assert TRANSLATE.answer(one) == {"translatedText": "Hello.", "warnings": [], **IDENTITY}
    several = {"translations": ["One.", "Two."], "alternatives": [["1."], []], **IDENTITY}
    assert TRANSLATE.answer(several) == {
        "translatedText": ["One.", "Two."],
        "alternatives": [["1."], []],
        **IDENTITY,
    }


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("zh", "zh-Hans"),
        ("ZH", "zh-Hans"),
        ("zh-CN", "zh-Hans"),
        ("zh_cn", "zh-Hans"),
        ("zh_Hans", "zh-Hans"),
        ("zh-Hans-TW", "zh-Hans"),  # the script decides before the region
        ("zh-TW", "zh-Hant"),
        ("zh_HK", "zh-Hant"),
        ("zh-Hant", "zh-Hant"),
        ("zt", "zh-Hant"),
        ("zho", "zh-Hans"),
        ("chi", "zh-Hans"),
        ("cmn-Hant-TW", "zh-Hant"),
        ("en-US", "en"),
        ("eng", "en"),
    ],
)
def test_chinese_and_english_codes_are_read_as_clients_send_them(code: str, expected: str) -> None:
    assert libretranslate._language(code).code == expected


@pytest.mark.parametrize("code", ["fr", "zhx", "ja-JP", "-zh", "zh" * 5000 + "-CN"])
def test_other_codes_are_refused_in_libretranslate_words(code: str) -> None:
    with pytest.raises(InvalidRequest, match="is not supported"):
        libretranslate._language(code)


def test_blank_texts_in_a_list_come_back_empty_in_place_and_skip_the_model() -> None:
    payload = lt(q=["你好", "  ", ""], alternatives=1)
    envelope = LibreTranslate.of(payload)
    assert envelope.blank == (1, 2) and envelope.answer_at_once(payload, CONFIG) is None
    assert envelope.parse(payload, CONFIG).texts == ("你好",)
    answer = envelope.answer({"translations": ["Hello"], "alternatives": [["Hi"]], **IDENTITY})
    assert answer["translatedText"] == ["Hello", "", ""] and answer["alternatives"] == [["Hi"], [], []]
    answer = LibreTranslate.of(lt(q=["", "谢谢"])).answer({"translations": ["Thanks"], **IDENTITY})
    assert answer["translatedText"] == ["", "Thanks"]


def test_a_list_of_blank_texts_is_answered_without_the_model_and_still_checked() -> None:
    payload = lt(q=["", " "], source="auto")
    envelope = LibreTranslate.of(payload)
    answer = envelope.answer_at_once(payload, CONFIG)
    assert isinstance(answer, dict) and answer["translatedText"] == ["", ""]
    assert len(answer["detectedLanguage"]) == 2
    with pytest.raises(InvalidRequest, match="fr is not supported"):
        LibreTranslate.of(lt(q=[""], target="fr")).answer_at_once(lt(q=[""], target="fr"), CONFIG)
    # Blank texts count against max_texts_per_request (3), with the model or without it.
    for q in (["", "", "", ""], ["", "", "", "你好"]):
        with pytest.raises(InvalidRequest, match=r"max_texts_per_request \(3\)"):
            envelope = LibreTranslate.of(lt(q=q))
            envelope.answer_at_once(lt(q=q), CONFIG) or envelope.parse(lt(q=q), CONFIG)
    # An empty q is still refused, as LibreTranslate refuses it.
    with pytest.raises(InvalidRequest, match="missing q"):
        LibreTranslate.of(lt(q=[])).parse(lt(q=[]), CONFIG)


def test_source_auto_answers_what_the_script_check_read() -> None:
    envelope = detect(lt(q=["你好", "Hello", "你好 world"], source="auto"))
    assert isinstance(envelope, LibreTranslate)
    assert envelope.detected == (("zh-Hans", 100.0), ("en", 0.0), ("zh-Hans", 28.6))
    body = envelope.answer({"translations": ["Hi", "Hello", "Hi world"]})
    assert body["detectedLanguage"][0] == {"confidence": 100.0, "language": "zh-Hans"}
    assert body["detectedLanguage"][1] == libretranslate.NOTHING_RECOGNISED
    single = detect(lt(source="Auto"))
    assert single.answer({"translation": "Hi"})["detectedLanguage"] == {
        "confidence": 100.0,
        "language": "zh-Hans",
    }
    assert "detectedLanguage" not in TRANSLATE.answer({"translation": "Hi"})


@pytest.mark.parametrize(
    ("q", "language"),
    [
        ("我喜欢吃寿司。", "zh-Hans"),
        ("東京是日本的首都。", "zh-Hans"),  # kanji only: the script check reads Chinese, as it translates
        ("私は寿司を食べるのが好きです。", "ja"),
        ("안녕하세요, 만나서 반갑습니다.", "ko"),
        ("Hello, world!", "en"),  # nothing recognised: LibreTranslate's answer, confidence 0
        (["你好。", "谢谢！"], "zh-Hans"),
    ],
)
def test_detect_answers_the_script_check(q: Any, language: str) -> None:
    best, *others = libretranslate.detect_answer({"q": q})
    assert best["language"] == language
    assert (best["confidence"] == 0.0) == (language == "en")
    # Ranked: the other languages whose own script the text has, each below the check's answer.
    assert all(0 < other["confidence"] <= best["confidence"] for other in others)


def test_detect_ranks_every_language_whose_script_it_reads() -> None:
    japanese = libretranslate.detect_answer({"q": "私は寿司を食べるのが好きです。"})
    assert [reading["language"] for reading in japanese] == ["ja", "zh-Hans"]  # kanji are Han too
    assert [r["language"] for r in libretranslate.detect_answer({"q": "我喜欢吃寿司。"})] == ["zh-Hans"]
    mixed = libretranslate.detect_answer({"q": "这家店叫すし屋，很好吃。안녕"})
    assert mixed[0]["language"] == "zh-Hans" and {r["language"] for r in mixed[1:]} == {"ja", "ko"}


def test_detect_needs_q() -> None:
    envelope = LibreTranslate("detect", form=True)
    for payload in ({}, {"q": ""}, {"q": [1]}):
        with pytest.raises(InvalidRequest) as caught:
            envelope.answer_at_once(payload, CONFIG)
        assert caught.value.status == 400 and "q" in caught.value.message
    assert TRANSLATE.answer_at_once(lt(), CONFIG) is None


def test_the_front_door_serves_the_languages_the_handler_knows() -> None:
    conf = (REPO / "deploy" / "nginx" / "libretranslate.conf").read_text()
    served = re.search(r"location = /languages \{.*?return 200 '(.*?)\\n';", conf, re.DOTALL)
    assert served is not None
    assert json.loads(served.group(1)) == libretranslate.languages_body()


def test_a_batch_answers_libretranslate_beside_the_other_protocols(
    handler: TranslationHandler, tiny_model_dir: Path
) -> None:
    batch: list[dict[str, Any]] = [
        {"body": lt(q=["你好。", "谢谢！"], libretranslate="translate")},
        form_item(q="你好。", source="auto", target="en"),
        form_item("detect", q="你好。"),
        {"body": {"text": "你好。"}},
        form_item(q="你好。", source="zh", target="fr"),
        form_item(q="ありがとうございます。", source="zh", target="en"),  # Japanese: the planner's 422
        {"body": lt(q=["一"] * 129, libretranslate="translate")},  # over max_texts_per_request
        form_item("detect"),
    ]
    context = make_context(tiny_model_dir, "int8", len(batch))
    responses = handler.handle(batch, context)
    statuses = [context.get_response_status(i)[0] for i in range(len(batch))]
    assert statuses == [200, 200, 200, 200, 400, 400, 400, 400]
    assert len(responses[0]["translatedText"]) == 2 and responses[0]["standin"] is True
    assert isinstance(responses[1]["translatedText"], str)
    assert responses[1]["detectedLanguage"] == {"confidence": 100.0, "language": "zh-Hans"}
    assert responses[2] == [{"confidence": 100.0, "language": "zh-Hans"}]
    assert isinstance(responses[3]["translation"], str)
    assert responses[4] == {"error": "fr is not supported"}
    assert set(responses[5]) == {"error"} and "Japanese" in responses[5]["error"]
    assert "max_texts_per_request" in responses[6]["error"]
    assert responses[7] == {"error": "Invalid request: missing q parameter"}
    json.dumps(responses)


def test_a_request_past_the_text_budget_is_libretranslates_400_and_the_batch_is_answered(
    tiny_model_dir: Path,
) -> None:
    budgeted = initialized_handler(tiny_model_dir, text_budget_ms=5)
    marked_up = "<p>" + "<b>你</b>" * 624 + "。"  # 5,000 characters: tens of ms to split and protect
    batch: list[dict[str, Any]] = [
        form_item(q="你好。", source="auto", target="en"),
        {"body": lt(q=[marked_up] * 4, format="html", libretranslate="translate")},
        form_item("detect", q="你好。"),
    ]
    context = make_context(tiny_model_dir, "int8", len(batch))
    responses = budgeted.handle(batch, context)
    assert [context.get_response_status(i)[0] for i in range(len(batch))] == [200, 400, 200]
    assert set(responses[1]) == {"error"} and "text 0 is too costly to process" in responses[1]["error"]
    assert isinstance(responses[0]["translatedText"], str)
    assert responses[2] == [{"confidence": 100.0, "language": "zh-Hans"}]
