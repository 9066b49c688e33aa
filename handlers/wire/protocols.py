"""Protocol adapters: the Open Inference Protocol (KServe v2, and v1) and LibreTranslate's API in and
out of our native shape.

TorchServe routes POST /v2/models/<m>/infer and /v1/models/<m>:predict to the same handler as
/predictions/<m>, with the body but not the route, so the protocol is read from the body: "inputs"
means v2, "instances" v1, "q" (or the front door's "libretranslate" route field, in JSON or a
form) LibreTranslate, anything else is our native request.
`unwrap` turns a v1/v2/LibreTranslate body into {"text": ..., **options}, which then goes through
the one native validation; `wrap_response`, `error_status` and `error_body` put a native answer
back into the protocol's shape.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from handlers.wire import libretranslate

ProtocolName = Literal["native", "v1", "v2", "libretranslate"]
# A response body: an object, or a list (LibreTranslate's /detect).
ResponseBody = dict[str, Any] | list[dict[str, Any]]

# Request-level parameters that only steer the transport: tritonclient adds binary_data_output when
# no outputs are named. We always answer JSON, which its result parser reads as well.
V2_TRANSPORT_PARAMETERS = frozenset({"binary_data_output"})
V2_REQUEST_KEYS = ("id", "inputs", "outputs", "parameters")
V2_TENSOR_KEYS = ("name", "shape", "datatype", "data", "parameters")
# Tensor parameters we cannot honour: the data then is not in the JSON at all.
V2_UNSUPPORTED_TENSOR_PARAMETERS = ("binary_data_size", "shared_memory_region")
V1_REQUEST_KEYS = ("instances", "parameters")
OUTPUT_NAME = "translation"
# The second output, with the "alternatives" parameter: shape [texts, the most any text has],
# row-major, "" where a text has fewer (a text of several sentences has none).
ALTERNATIVES_OUTPUT = "alternatives"


class ProtocolError(ValueError):
    """A v1/v2 body that does not follow the protocol; the message names the problem (a 400)."""


@dataclass(frozen=True)
class Envelope:
    """The protocol a request came in, and what its answer must carry back (the v2 request id,
    LibreTranslate's route and detected languages)."""

    name: ProtocolName = "native"
    request_id: str | None = None
    libretranslate: libretranslate.Call | None = None


NATIVE = Envelope()


def detect(payload: Any, form: bool = False) -> Envelope:
    """The protocol of a decoded body (or of a form's fields); never raises (unwrap validates)."""
    if not isinstance(payload, dict):
        return NATIVE
    if form or libretranslate.ROUTE_FIELD in payload:  # LibreTranslate's, from the front door
        return Envelope("libretranslate", libretranslate=libretranslate.call_of(payload, form))
    if "inputs" in payload:
        request_id = payload.get("id")
        return Envelope("v2", request_id if isinstance(request_id, str) else None)
    if "instances" in payload:
        return Envelope("v1")
    if "q" in payload:
        return Envelope("libretranslate", libretranslate=libretranslate.call_of(payload, form))
    return NATIVE


def unwrap(envelope: Envelope, payload: Any, option_keys: Collection[str]) -> Any:
    """The native payload for a v1/v2 body (native ones pass through); option_keys may appear in
    "parameters". LibreTranslate bodies are refused in its words (InvalidRequest, a 400)."""
    if envelope.libretranslate is not None:
        return libretranslate.unwrap(envelope.libretranslate, payload)
    if envelope.name == "v2":
        return _unwrap_v2(payload, option_keys)
    if envelope.name == "v1":
        return _unwrap_v1(payload, option_keys)
    return payload


def wrap_response(envelope: Envelope, body: Mapping[str, Any]) -> dict[str, Any]:
    """A native success body (always "translations" for v1/v2: they send lists) in the protocol's shape."""
    if envelope.name == "native":
        return dict(body)
    if envelope.libretranslate is not None:
        return libretranslate.wrap(envelope.libretranslate, body)
    translations = body["translations"]
    rest = {key: value for key, value in body.items() if key != "translations"}
    if envelope.name == "v1":
        # v1 has only "predictions"; our identity (the stand-in notice above all) travels beside it.
        return {"predictions": translations, **rest}
    parameters = {
        key: value for key, value in rest.items() if key not in ("model", "version", "alternatives")
    }
    response: dict[str, Any] = {"model_name": body["model"], "model_version": body["version"]}
    if envelope.request_id is not None:
        response["id"] = envelope.request_id
    response["outputs"] = [
        {"name": OUTPUT_NAME, "datatype": "BYTES", "shape": [len(translations)], "data": translations}
    ]
    if "alternatives" in body:
        response["outputs"].append(_alternatives_tensor(body["alternatives"]))
    response["parameters"] = {key: _parameter_value(value) for key, value in parameters.items()}
    return response


def error_status(envelope: Envelope, status: int) -> int:
    """The status an error gets in the protocol: LibreTranslate's clients know only its 400."""
    return libretranslate.error_status(status) if envelope.libretranslate is not None else status


def answer_at_once(envelope: Envelope, payload: Any) -> ResponseBody | None:
    """The answer to a request that needs no model (LibreTranslate's /detect), else None."""
    call = envelope.libretranslate
    return libretranslate.detect_answer(payload) if call and call.route == "detect" else None


def error_body(envelope: Envelope, status: int, message: str, kind: str = "InvalidRequest") -> dict[str, Any]:
    """The error in the protocol's shape: v1, v2 and LibreTranslate all use {"error": message}."""
    if envelope.name == "native":
        return {"code": status, "type": kind, "message": message}
    return {"error": message}


def _parameter_value(value: Any) -> str | int | float | bool:
    # The protocol allows only string, number or boolean parameter values: structures go as JSON text.
    if isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, ensure_ascii=False)


def _unwrap_v2(payload: dict[str, Any], option_keys: Collection[str]) -> dict[str, Any]:
    _only_keys(payload, V2_REQUEST_KEYS, "v2 inference request")
    if "id" in payload and not isinstance(payload["id"], str):
        raise ProtocolError(f'"id" must be a string, got {type(payload["id"]).__name__}')
    inputs = payload["inputs"]
    if not isinstance(inputs, list) or len(inputs) != 1:
        count = f"{len(inputs)} tensors" if isinstance(inputs, list) else type(inputs).__name__
        raise ProtocolError(
            '"inputs" must be a list holding exactly one tensor (datatype BYTES, shape [n]) of texts, '
            f"got {count}"
        )
    texts = _texts_of_tensor(inputs[0])
    _check_outputs(payload.get("outputs"))
    parameters = _parameters(payload, option_keys, ignore=V2_TRANSPORT_PARAMETERS)
    return {"text": texts, **parameters}


def _texts_of_tensor(tensor: Any) -> list[str]:
    if not isinstance(tensor, dict):
        raise ProtocolError(f"inputs[0] must be a tensor object, got {type(tensor).__name__}")
    _only_keys(tensor, V2_TENSOR_KEYS, "inputs[0]")
    # Binary data first: it explains the missing "data" (tritonclient's default mode sends it raw).
    parameters = tensor.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError("inputs[0].parameters must be an object")
    unsupported = [key for key in V2_UNSUPPORTED_TENSOR_PARAMETERS if key in parameters]
    if unsupported:
        raise ProtocolError(
            f"inputs[0] uses {unsupported}: binary and shared-memory tensor data are not supported; "
            'send the texts as JSON strings in "data" '
            "(tritonclient: set_data_from_numpy(..., binary_data=False))"
        )
    missing = [key for key in ("name", "shape", "datatype", "data") if key not in tensor]
    if missing:
        raise ProtocolError(f"inputs[0] lacks {missing}")
    if not isinstance(tensor["name"], str):
        raise ProtocolError('inputs[0].name must be a string (for example "text")')
    if tensor["datatype"] != "BYTES":
        raise ProtocolError(f'inputs[0].datatype must be "BYTES" (texts), got {tensor["datatype"]!r}'[:200])
    data, shape = tensor["data"], tensor["shape"]
    if not isinstance(data, list):
        raise ProtocolError(f"inputs[0].data must be a list of strings, got {type(data).__name__}")
    bad = [i for i, text in enumerate(data) if not isinstance(text, str)]
    if bad:
        raise ProtocolError(
            f"inputs[0].data must be a flat list of strings; item {bad[0]} is {type(data[bad[0]]).__name__}"
        )
    if not (isinstance(shape, list) and len(shape) == 1 and type(shape[0]) is int):
        raise ProtocolError(
            f"inputs[0].shape must be [n], one dimension: the number of texts; got {shape!r}"[:200]
        )
    if shape[0] != len(data):
        raise ProtocolError(f"inputs[0].shape says {shape[0]} texts but data holds {len(data)}")
    if not data:
        raise ProtocolError("inputs[0].data is empty: send at least one text")
    return data


def _check_outputs(outputs: Any) -> None:
    if outputs is None:
        return
    if not isinstance(outputs, list) or not all(isinstance(output, dict) for output in outputs):
        raise ProtocolError('"outputs" must be a list of objects like {"name": "translation"}')
    names = [output.get("name") for output in outputs]
    unknown = [name for name in names if name not in (OUTPUT_NAME, ALTERNATIVES_OUTPUT)]
    if unknown:
        raise ProtocolError(
            f'unknown output(s) {unknown}: the outputs are "{OUTPUT_NAME}" and "{ALTERNATIVES_OUTPUT}"'[:300]
        )


def _alternatives_tensor(alternatives: list[list[str]]) -> dict[str, Any]:
    width = max((len(row) for row in alternatives), default=0)
    data = [text for row in alternatives for text in [*row, *[""] * (width - len(row))]]
    return {
        "name": ALTERNATIVES_OUTPUT,
        "datatype": "BYTES",
        "shape": [len(alternatives), width],
        "data": data,
    }


def _unwrap_v1(payload: dict[str, Any], option_keys: Collection[str]) -> dict[str, Any]:
    _only_keys(payload, V1_REQUEST_KEYS, "v1 predict request")
    instances = payload["instances"]
    if not isinstance(instances, list) or not instances:
        raise ProtocolError('"instances" must be a non-empty list of texts, like {"instances": ["你好"]}')
    texts = [_text_of_instance(index, instance) for index, instance in enumerate(instances)]
    return {"text": texts, **_parameters(payload, option_keys)}


def _text_of_instance(index: int, instance: Any) -> str:
    # TF Serving's row format names an input per instance: {"text": "..."} is the same as "...".
    if isinstance(instance, dict) and set(instance) == {"text"}:
        instance = instance["text"]
    if not isinstance(instance, str):
        raise ProtocolError(f'instances[{index}] must be a string or {{"text": "..."}}')
    return instance


def _parameters(
    payload: Mapping[str, Any], option_keys: Collection[str], ignore: Collection[str] = ()
) -> dict[str, Any]:
    parameters = payload.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(f'"parameters" must be an object, got {type(parameters).__name__}')
    options = {key: value for key, value in parameters.items() if key not in ignore}
    unknown = sorted(set(options) - set(option_keys))
    if unknown:
        raise ProtocolError(
            f"unknown parameter(s) {unknown}; allowed parameters: {sorted(option_keys)}"[:400]
        )
    return options


def _only_keys(mapping: Mapping[str, Any], allowed: Collection[str], what: str) -> None:
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise ProtocolError(
            f"unknown field(s) {unknown[:10]} in the {what}; allowed fields: {list(allowed)}"[:400]
        )
