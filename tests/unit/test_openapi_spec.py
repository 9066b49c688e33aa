"""docs/openapi.yaml: a valid OpenAPI 3.1 document that agrees with the code it describes.

The spec's limits, enums and field names are compared with what the handler enforces (HandlerConfig,
the shipped model configs, wire.parsing and the envelopes), and the handler's own answers are validated
against the spec's response schemas, so the contract cannot drift silently.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from handlers.handler_config import DecoderName, HandlerConfig, Variant
from handlers.text.documents import DOCUMENT_FORMATS
from handlers.wire import kserve_v1, kserve_v2, libretranslate, parsing
from handlers.zh_en_handler import TranslationHandler
from serving.nginx_conf import FrontDoorConfig
from serving.torchserve import PRODUCTION_CONFIG
from tests.handler_context import make_context

REPO = Path(__file__).resolve().parents[2]
SPEC_PATH = REPO / "docs" / "openapi.yaml"
SPEC: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text())
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]
LIMITS: dict[str, int] = SPEC["info"]["x-limits"]
SPEC_URI = "urn:zh-en:openapi"
REGISTRY: Registry = Registry().with_resource(
    SPEC_URI, Resource.from_contents(SPEC, default_specification=DRAFT202012)
)


METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def operations(front_door: bool | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) for every operation; front_door picks the paths only the nginx front
    door serves (LibreTranslate's, with their own `servers`) or only TorchServe's."""
    return [
        (path, method, operation)
        for path, item in SPEC["paths"].items()
        for method, operation in item.items()
        if method in METHODS and (front_door is None or ("servers" in item) == front_door)
    ]


def validator(pointer: str) -> Draft202012Validator:
    """A validator for the spec's schema at `pointer` (e.g. components/schemas/Text), $refs resolved."""
    return Draft202012Validator({"$ref": f"{SPEC_URI}#/{pointer}"}, registry=REGISTRY)


def shipped_configs() -> dict[str, HandlerConfig]:
    return {
        path.name: HandlerConfig.from_mapping(yaml.safe_load(path.read_text()).get("handler"))
        for path in sorted((REPO / "config").glob("zh_en_*.yaml"))
    }


def test_the_spec_is_valid_openapi_3_1() -> None:
    assert SPEC["openapi"].startswith("3.1")
    validate(SPEC)


def test_every_operation_documents_auth_and_json_errors() -> None:
    assert SPEC["security"] == [{"inferenceKey": []}]
    assert SPEC["components"]["securitySchemes"]["inferenceKey"] == {
        **SPEC["components"]["securitySchemes"]["inferenceKey"],
        "type": "http",
        "scheme": "bearer",
    }
    for path, method, operation in operations(front_door=False):
        responses = operation["responses"]
        assert "200" in responses and "400" in responses, (method, path)
        if path != "/ping":
            assert {"404", "413", "415", "422", "503", "507"} <= set(responses), (method, path)
    # LibreTranslate's routes answer in its statuses: 400 for every invalid request, 403 a wrong key.
    for path, method, operation in operations(front_door=True):
        responses = set(operation["responses"])
        if path in ("/health", "/suggest", "/spec"):  # answered by the front door alone, from no input
            assert responses == {"/health": {"200", "503"}, "/suggest": {"403"}, "/spec": {"200"}}[path]
            continue
        assert {"200", "400"} <= responses, (method, path)
        if method == "post":
            assert {"403", "429", "502", "503", "504"} <= responses and "413" not in responses, path


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_limits_match_the_served_config(name: str) -> None:
    if name == "max_request_size":
        # Every shipped TorchServe config, and the front door: a body one layer lets through must
        # not get a bare 413 from the next (a replica once allowed 64 KiB behind nginx's 128).
        for properties in sorted(PRODUCTION_CONFIG.parent.glob("config*.properties")):
            served = re.search(r"^max_request_size=(\d+)$", properties.read_text(), re.MULTILINE)
            assert served and int(served.group(1)) == LIMITS[name], properties.name
        assert FrontDoorConfig().body_limit_kib * 1024 == LIMITS[name]
        return
    for config_name, config in shipped_configs().items():
        assert getattr(config, name) == LIMITS[name], f"{config_name}: {name}"


def test_the_front_door_states_the_served_character_limit() -> None:
    # LibreTranslate's /frontend/settings charLimit (per text), rendered from FrontDoorConfig.
    assert FrontDoorConfig().char_limit == LIMITS["max_chars_per_text"]


@pytest.mark.parametrize(
    "name",
    [
        "max_texts_per_request",
        "max_chars_per_text",
        "max_chars_per_request",
        "max_sentences_per_request",
        "max_beams",
        "max_new_tokens",
    ],
)
def test_limits_match_the_handler_defaults(name: str) -> None:
    # What a model config that leaves the key out serves.
    assert getattr(HandlerConfig(), name) == LIMITS[name]


def test_schema_limits_are_the_stated_limits() -> None:
    texts, chars = LIMITS["max_texts_per_request"], LIMITS["max_chars_per_text"]
    assert SCHEMAS["Text"]["maxLength"] == chars
    text_list = SCHEMAS["TranslationRequest"]["properties"]["text"]["oneOf"][1]
    assert text_list["maxItems"] == texts
    assert SCHEMAS["V1PredictRequest"]["properties"]["instances"]["maxItems"] == texts
    tensor = SCHEMAS["V2InputTensor"]["properties"]
    assert tensor["data"]["maxItems"] == tensor["shape"]["items"]["maximum"] == texts
    assert SCHEMAS["NumBeams"]["maximum"] == LIMITS["max_beams"]
    assert (
        SCHEMAS["MaxNewTokens"]["maximum"] == SCHEMAS["MinNewTokens"]["maximum"] == LIMITS["max_new_tokens"]
    )
    assert SCHEMAS["NumBeams"]["minimum"] == SCHEMAS["MaxNewTokens"]["minimum"] == 1
    assert SCHEMAS["MinNewTokens"]["minimum"] == 0


def test_enums_match_the_code() -> None:
    assert SCHEMAS["Variant"]["enum"] == list(get_args(Variant))
    assert SCHEMAS["Decoder"]["enum"] == list(get_args(DecoderName))
    assert SCHEMAS["Format"]["enum"] == list(DOCUMENT_FORMATS)


def test_request_fields_match_the_parser() -> None:
    assert list(SCHEMAS["TranslationRequest"]["properties"]) == list(parsing.ALLOWED_KEYS)
    options = list(parsing.PROTOCOL_KEYS)
    assert list(SCHEMAS["Options"]["properties"]) == options
    v2_parameters = SCHEMAS["V2Parameters"]["properties"]
    assert set(v2_parameters) == set(options) | kserve_v2.V2_TRANSPORT_PARAMETERS
    assert list(SCHEMAS["V2InferenceRequest"]["properties"]) == list(kserve_v2.V2_REQUEST_KEYS)
    assert list(SCHEMAS["V2InputTensor"]["properties"]) == list(kserve_v2.V2_TENSOR_KEYS)
    assert list(SCHEMAS["V1PredictRequest"]["properties"]) == list(kserve_v1.V1_REQUEST_KEYS)
    fields = [*libretranslate.FIELDS, "api_key"]
    assert list(SCHEMAS["LibreTranslateRequest"]["properties"]) == fields
    assert list(SCHEMAS["LibreTranslateForm"]["properties"]) == fields
    assert SCHEMAS["LibreTranslateRequest"]["properties"]["format"]["enum"] == list(libretranslate.FORMATS)
    # What the front door passes on is what the handler reads.
    njs = (REPO / "deploy" / "nginx" / "front_door.js").read_text()
    passed_on = re.search(r"const LIBRETRANSLATE_FIELDS = \[(.*?)\];", njs)
    assert passed_on is not None
    assert re.findall(r"'(\w+)'", passed_on.group(1)) == list(libretranslate.FIELDS)


def examples() -> list[tuple[str, str, Any]]:
    """(schema pointer, example name, value) for every example in the spec."""
    found = []
    for path, _, operation in operations():
        body = operation.get("requestBody", {})
        if "$ref" in body:
            body = SPEC["components"]["requestBodies"][body["$ref"].rsplit("/", 1)[1]]
        for media, content in body.get("content", {}).items():
            for name, example in content.get("examples", {}).items():
                pointer = content["schema"]["$ref"].removeprefix("#/")
                found.append((pointer, f"{path} {media} {name}", example["value"]))
    return found


@pytest.mark.parametrize(("pointer", "where", "value"), examples())
def test_examples_follow_their_schemas(pointer: str, where: str, value: Any) -> None:
    validator(pointer).validate(value)


def tensor(*texts: str) -> dict[str, Any]:
    return {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": list(texts)}]}


# (request body, the status the handler gives it, the response schema it must follow)
ANSWERS = [
    ({"text": "你好。"}, 200, "TranslationResponse"),
    ({"text": ["你好。", "Hello."], "num_beams": 1}, 200, "TranslationResponse"),
    ("是那家。", 200, "TranslationResponse"),
    (tensor("你好。", "谢谢！") | {"id": "r1"}, 200, "V2InferenceResponse"),
    ({"instances": ["你好。", {"text": "谢谢！"}]}, 200, "V1PredictResponse"),
    ({"text": ["你好。"], "sentences": True}, 200, "TranslationResponse"),
    ({"text": "<p>你好。</p>", "sentences": True, "format": "html"}, 200, "TranslationResponse"),
    (tensor("你好。") | {"parameters": {"sentences": True}}, 200, "V2InferenceResponse"),
    ({"instances": ["你好。"], "parameters": {"sentences": True}}, 200, "V1PredictResponse"),
    ({"text": ""}, 400, "InvalidRequest"),
    ({"text": "ありがとうございます。"}, 422, "InvalidRequest"),
    ({"text": ["你好"] * 129}, 413, "InvalidRequest"),
    ({"text": "你好", "num_beams": 99}, 422, "InvalidRequest"),
    (tensor("你好") | {"inputs": []}, 400, "ProtocolError"),
    ({"instances": ["你好"] * 129}, 413, "ProtocolError"),
    # LibreTranslate's, as the front door passes them on (its route in "libretranslate").
    (
        {"q": "你好。", "source": "zh", "target": "en", "libretranslate": "translate"},
        200,
        "LibreTranslateResponse",
    ),
    ({"q": ["你好。"], "source": "auto", "target": "en", "alternatives": 2}, 200, "LibreTranslateResponse"),
    ({"q": "你好。", "libretranslate": "detect"}, 200, "LibreTranslateDetections"),
    ({"q": "你好", "source": "zh", "target": "fr"}, 400, "LibreTranslateError"),
    ({"q": "ありがとうございます。", "source": "zh", "target": "en"}, 400, "LibreTranslateError"),
]


@pytest.mark.parametrize(("body", "status", "schema"), ANSWERS)
def test_the_handler_answers_as_the_spec_says(
    handler: TranslationHandler, tiny_model_dir: Path, body: Any, status: int, schema: str
) -> None:
    context = make_context(tiny_model_dir, "int8", 1)
    (response,) = handler.handle([{"body": body}], context)
    assert context.get_response_status(0)[0] == status, response
    validator(f"components/schemas/{schema}").validate(response)
    if schema == "V2InferenceResponse":  # structured parameters travel as JSON text: check it too
        parameters = response["parameters"]
        for name, content in SCHEMAS["V2InferenceResponse"]["properties"]["parameters"]["properties"].items():
            if name in parameters and "contentSchema" in content:
                pointer = f"components/schemas/V2InferenceResponse/properties/parameters/properties/{name}"
                validator(f"{pointer}/contentSchema").validate(json.loads(parameters[name]))
