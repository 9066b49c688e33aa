"""KServe's v2 protocol, the Open Inference Protocol (POST /v2/models/<model>/infer): one BYTES
tensor of texts in, a "translation" tensor (and "alternatives", when asked) out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from handlers.wire.envelope import Envelope
from handlers.wire.errors import InvalidRequest
from handlers.wire.kserve import ProtocolError, only_keys, request_parameters

# Request-level parameters that only steer the transport: tritonclient adds binary_data_output when
# no outputs are named. We always answer JSON, which its result parser reads as well.
V2_TRANSPORT_PARAMETERS = frozenset({"binary_data_output"})
V2_REQUEST_KEYS = ("id", "inputs", "outputs", "parameters")
V2_TENSOR_KEYS = ("name", "shape", "datatype", "data", "parameters")
# Tensor parameters we cannot honour: the data then is not in the JSON at all.
V2_UNSUPPORTED_TENSOR_PARAMETERS = ("binary_data_size", "shared_memory_region")
OUTPUT_NAME = "translation"
# The second output, with the "alternatives" parameter: shape [texts, the most any text has],
# row-major, "" where a text has fewer (a text of several sentences has none).
ALTERNATIVES_OUTPUT = "alternatives"


@dataclass(frozen=True)
class KServeV2(Envelope):
    """request_id: the request's "id", which the answer carries back."""

    request_id: str | None = None
    name: ClassVar[str] = "v2"

    @classmethod
    def detect(cls, payload: Any) -> Self | None:
        if not isinstance(payload, dict) or "inputs" not in payload:
            return None
        request_id = payload.get("id")
        return cls(request_id if isinstance(request_id, str) else None)

    def unwrap(self, payload: Any) -> dict[str, Any]:
        only_keys(payload, V2_REQUEST_KEYS, "v2 inference request")
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
        parameters = request_parameters(payload, ignore=V2_TRANSPORT_PARAMETERS)
        return {"text": texts, **parameters}

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Always "translations" (v2 sends lists); our other fields travel as parameters."""
        translations = body["translations"]
        parameters = {
            key: value
            for key, value in body.items()
            if key not in ("translations", "model", "version", "alternatives")
        }
        response: dict[str, Any] = {"model_name": body["model"], "model_version": body["version"]}
        if self.request_id is not None:
            response["id"] = self.request_id
        response["outputs"] = [
            {"name": OUTPUT_NAME, "datatype": "BYTES", "shape": [len(translations)], "data": translations}
        ]
        if "alternatives" in body:
            response["outputs"].append(_alternatives_tensor(body["alternatives"]))
        response["parameters"] = {key: _parameter_value(value) for key, value in parameters.items()}
        return response

    def error_body(self, error: InvalidRequest) -> dict[str, Any]:
        return {"error": error.message}


def _parameter_value(value: Any) -> str | int | float | bool:
    # The protocol allows only string, number or boolean parameter values: structures go as JSON text.
    if isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, ensure_ascii=False)


def _texts_of_tensor(tensor: Any) -> list[str]:
    if not isinstance(tensor, dict):
        raise ProtocolError(f"inputs[0] must be a tensor object, got {type(tensor).__name__}")
    only_keys(tensor, V2_TENSOR_KEYS, "inputs[0]")
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
