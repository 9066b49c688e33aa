"""Open Inference Protocol adapters: v1/v2 bodies in, native validation, v1/v2 answers and errors out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ts.context import RequestProcessor

from handlers.handler_config import HandlerConfig
from handlers.model.options import GenerationOptions
from handlers.wire.envelopes import detect, read_body
from handlers.wire.errors import InvalidRequest
from handlers.wire.kserve import ProtocolError
from handlers.wire.kserve_v1 import KServeV1
from handlers.wire.kserve_v2 import KServeV2
from handlers.wire.native import Native
from handlers.zh_en_handler import TranslationHandler
from tests.handler_context import make_context

CONFIG = HandlerConfig(max_texts_per_request=3, max_chars_per_text=20, max_new_tokens=50)
V2 = KServeV2()
V1 = KServeV1()
NATIVE = Native()


def v2(*texts: Any, **extra: Any) -> dict[str, Any]:
    tensor = {"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": list(texts)}
    return {"inputs": [tensor], **extra}


def test_detect_reads_the_protocol_from_the_body() -> None:
    assert detect(v2("你好", id="r1")) == KServeV2("r1")
    assert detect(v2("你好", id=7)) == V2  # a bad id is unwrap's to refuse
    assert detect({"instances": ["你好"]}) == V1
    assert detect({"text": "你好"}) == NATIVE
    assert detect("你好") == NATIVE
    assert detect([1]) == NATIVE


def test_v2_unwraps_to_the_native_request() -> None:
    body = v2("一", "二", parameters={"num_beams": 2, "binary_data_output": True})
    assert V2.unwrap(body) == {"text": ["一", "二"], "num_beams": 2}
    tritonclient_style = v2("一", outputs=[{"name": "translation", "parameters": {"binary_data": False}}])
    tritonclient_style["inputs"][0]["parameters"] = {"content_type": "str"}
    assert V2.unwrap(tritonclient_style) == {"text": ["一"]}


def test_v1_unwraps_strings_and_text_objects() -> None:
    body = {"instances": ["一", {"text": "二"}], "parameters": {"max_new_tokens": 5}}
    assert V1.unwrap(body) == {"text": ["一", "二"], "max_new_tokens": 5}
    assert NATIVE.unwrap({"text": "x"}) == {"text": "x"}


def bad_tensor(**override: Any) -> dict[str, Any]:
    body = v2("一", "二")
    body["inputs"][0].update(override)
    return body


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"inputs": []}, "exactly one tensor"),
        ({"inputs": "一"}, "exactly one tensor"),
        ({"inputs": [v2("一")["inputs"][0]] * 2}, "of texts, got 2 tensors"),
        ({"inputs": ["一"]}, "must be a tensor object"),
        (v2("一", id=3), '"id" must be a string'),
        (v2("一", instances=["二"]), "unknown field(s) ['instances'] in the v2 inference request"),
        (bad_tensor(datatype="FP32"), 'datatype must be "BYTES"'),
        (bad_tensor(shape=[3]), "shape says 3 texts but data holds 2"),
        (bad_tensor(shape=[2, 1]), "shape must be [n]"),
        (bad_tensor(shape=[True]), "shape must be [n]"),
        (bad_tensor(shape=2), "shape must be [n]"),
        (bad_tensor(data=["一", 2]), "item 1 is int"),
        (bad_tensor(data=[["一"], ["二"]]), "flat list of strings"),
        (bad_tensor(data="一二"), "data must be a list"),
        (bad_tensor(data=[], shape=[0]), "data is empty"),
        (bad_tensor(name=1), "name must be a string"),
        (bad_tensor(parameters={"binary_data_size": 9}), "binary_data=False"),
        (bad_tensor(parameters=[]), "parameters must be an object"),
        (bad_tensor(extra=1), "unknown field(s) ['extra'] in the inputs[0]"),
        ({"inputs": [{"name": "text", "datatype": "BYTES"}]}, "lacks ['shape', 'data']"),
        (v2("一", outputs=[{"name": "logits"}]), "unknown output(s) ['logits']"),
        (v2("一", outputs="translation"), '"outputs" must be a list'),
        (v2("一", parameters={"priority": 1}), "unknown parameter(s) ['priority']"),
        (v2("一", parameters={"text": "x"}), "unknown parameter(s) ['text']"),
        (v2("一", parameters=[1]), '"parameters" must be an object'),
    ],
)
def test_bad_v2_bodies_name_the_problem(body: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        detect(body).unwrap(body)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"instances": []}, "non-empty list"),
        ({"instances": "一"}, "non-empty list"),
        ({"instances": [1]}, "instances[0] must be a string"),
        ({"instances": [{"text": "一", "lang": "zh"}]}, "instances[0] must be a string"),
        ({"instances": ["一"], "text": "二"}, "unknown field(s) ['text']"),
        ({"instances": ["一"], "parameters": {"beams": 2}}, "unknown parameter(s) ['beams']"),
        ({"instances": ["一"], "parameters": None}, '"parameters" must be an object'),
    ],
)
def test_bad_v1_bodies_name_the_problem(body: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        V1.unwrap(body)
    assert fragment in str(caught.value)


IDENTITY = {"model": "zh_en", "version": "1.0-int8", "variant": "int8", "decoder": "fast", "standin": False}


def test_wrap_response_in_each_shape() -> None:
    body = {"translations": ["One.", "Two."], **IDENTITY}
    assert NATIVE.answer(body) == body
    assert V1.answer(body) == {"predictions": ["One.", "Two."], **IDENTITY}
    assert KServeV2("r1").answer(body) == {
        "model_name": "zh_en",
        "model_version": "1.0-int8",
        "id": "r1",
        "outputs": [{"name": "translation", "datatype": "BYTES", "shape": [2], "data": ["One.", "Two."]}],
        "parameters": {"variant": "int8", "decoder": "fast", "standin": False},
    }
    assert "id" not in V2.answer(body)


def test_v2_parameters_stay_scalars() -> None:
    # The protocol allows string, number or boolean parameter values: structures travel as JSON text.
    body = {"translations": ["x"], **IDENTITY, "stats": {"sentences": 1}, "untranslated": [0]}
    parameters = V2.answer(body)["parameters"]
    assert json.loads(parameters["stats"]) == {"sentences": 1} and parameters["untranslated"] == "[0]"


def test_error_bodies() -> None:
    assert NATIVE.error_body(InvalidRequest("too many", 413)) == {
        "code": 413,
        "type": "InvalidRequest",
        "message": "too many",
    }
    assert V1.error_body(InvalidRequest("bad")) == V2.error_body(InvalidRequest("bad")) == {"error": "bad"}


def test_the_body_names_its_protocol_then_is_unwrapped_and_validated_once() -> None:
    envelope, payload = read_body({"body": v2("一", "二", id="r9", parameters={"num_beams": 2})})
    assert envelope == KServeV2("r9")
    request = envelope.parse(payload, CONFIG)
    assert request.texts == ("一", "二") and request.as_list
    assert request.options == GenerationOptions(num_beams=2)
    assert read_body({"body": b'{"instances": ["\\u4e00"]}'})[0] == V1
    assert read_body({"body": {"text": "一"}})[0] == NATIVE


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (v2("a", "b", "c", "d"), 413, "max_texts_per_request (3)"),
        (v2("长" * 21), 413, "max_chars_per_text (20)"),
        (v2(" "), 400, "empty"),
        (v2("a", parameters={"num_beams": 99}), 422, "num_beams"),
        ({"instances": ["a"] * 4}, 413, "max_texts_per_request (3)"),
        ({"instances": ["a"], "parameters": {"max_new_tokens": "5"}}, 400, "integer"),
        ({"inputs": [{"datatype": "FP32"}]}, 400, "lacks"),
    ],
)
def test_native_limits_apply_whatever_the_protocol(body: dict[str, Any], status: int, fragment: str) -> None:
    envelope, payload = read_body({"body": body})
    assert envelope == detect(body)  # known before validation fails: the error is answered in its shape
    with pytest.raises(InvalidRequest) as caught:
        envelope.parse(payload, CONFIG)
    assert caught.value.status == status and fragment in caught.value.message


def test_a_mixed_batch_answers_each_request_in_its_protocol(
    handler: TranslationHandler, tiny_model_dir: Path
) -> None:
    batch: list[dict[str, Any]] = [
        {"body": v2("你好", "谢谢", id="a")},
        {"body": {"instances": ["你好"]}},
        {"body": {"text": "你好"}},
        {"body": v2("你好", "谢谢", "一", "二", "三")},  # over max_texts_per_request (4)
        {"body": {"instances": [3]}},
        {"body": v2("ありがとうございます")},  # Japanese: refused after parsing, by the sentence planner
    ]
    context = make_context(tiny_model_dir, "int8", len(batch))
    responses = handler.handle(batch, context)
    statuses = [context.get_response_status(i)[0] for i in range(len(batch))]
    assert statuses == [200, 200, 200, 413, 400, 422]
    assert responses[0]["id"] == "a" and responses[0]["outputs"][0]["shape"] == [2]
    assert responses[0]["parameters"]["standin"] is True and "notice" in responses[0]["parameters"]
    assert len(responses[1]["predictions"]) == 1 and responses[1]["standin"] is True
    assert isinstance(responses[2]["translation"], str)
    assert set(responses[3]) == {"error"} and "max_texts_per_request (4)" in responses[3]["error"]
    assert "instances[0]" in responses[4]["error"]
    assert set(responses[5]) == {"error"} and "Japanese" in responses[5]["error"], responses[5]
    json.dumps(responses)


def test_tritonclient_binary_tensors_get_the_v2_hint(
    handler: TranslationHandler, tiny_model_dir: Path
) -> None:
    """tritonclient's default binary mode: a JSON header, then the raw tensor bytes after it."""
    header = {
        "inputs": [
            {"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 10}}
        ]
    }
    body = json.dumps(header).encode() + b"\x06\x00\x00\x00" + "你好".encode()
    context = make_context(tiny_model_dir, "int8", 1)
    responses = handler.handle([{"body": body}], context)
    assert context.get_response_status(0)[0] == 400
    assert set(responses[0]) == {"error"} and "binary_data=False" in responses[0]["error"]


def test_explain_routes_get_a_501_in_the_protocol_shape(
    handler: TranslationHandler, tiny_model_dir: Path
) -> None:
    batch: list[dict[str, Any]] = [{"body": {"instances": ["你好"]}}, {"body": {"text": "你好"}}]
    context = make_context(tiny_model_dir, "int8", len(batch))
    context.request_processor[0] = RequestProcessor({"explain": "True"})
    context.request_processor[1] = RequestProcessor({"explain": "True"})
    responses = handler.handle(batch, context)
    assert [context.get_response_status(i)[0] for i in range(2)] == [501, 501]
    assert "no explanations" in responses[0]["error"] and responses[1]["type"] == "InvalidRequest"
    # The header is read per request: a prediction in the same batch is answered.
    context = make_context(tiny_model_dir, "int8", len(batch))
    context.request_processor[0] = RequestProcessor({"explain": "True"})
    responses = handler.handle(batch, context)
    assert [context.get_response_status(i)[0] for i in range(2)] == [501, 200]
