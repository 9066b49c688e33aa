"""The Open Inference Protocol on a real server: v2 as tritonclient speaks it and as plain JSON, v1, errors.

TorchServe routes POST /v2/models/<m>/infer and /v1/models/<m>:predict to our handler; these tests
check what reaches the client through TorchServe's frontend, not just what the handler returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from handlers.handler_config import HandlerConfig
from serving.client import read_key
from serving.torchserve import TorchServe

pytestmark = pytest.mark.e2e


def auth(server: TorchServe) -> dict[str, str]:
    return {"Authorization": f"Bearer {read_key(server.key_file, 'inference')}"}


def v2_body(*texts: str, **extra: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": list(texts)}],
        **extra,
    }


def post(server: TorchServe, path: str, body: Any) -> requests.Response:
    return requests.post(
        f"{server.client.endpoints.inference}{path}", json=body, headers=auth(server), timeout=120
    )


V2_PATH = "/v2/models/zh_en/infer"
V1_PATH = "/v1/models/zh_en:predict"


@pytest.fixture(scope="module")
def triton_client(server: TorchServe) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(url=f"127.0.0.1:{server.ports.inference}", network_timeout=120.0)


def texts_input(texts: list[str]) -> triton.InferInput:
    tensor = triton.InferInput("text", [len(texts)], "BYTES")
    # JSON data: binary tensor data is a Triton extension our handler refuses with a 400 that says so.
    tensor.set_data_from_numpy(np.array(texts, dtype=object), binary_data=False)
    return tensor


def test_v2_with_tritonclient(server: TorchServe, triton_client: triton.InferenceServerClient) -> None:
    result = triton_client.infer(
        "zh_en",
        [texts_input(["汤姆不会同意的", "谢谢！"])],
        outputs=[triton.InferRequestedOutput("translation", binary_data=False)],
        request_id="req-1",
        parameters={"num_beams": 2, "max_new_tokens": 8},
        headers=auth(server),
    )
    translations = result.as_numpy("translation")
    assert translations is not None and translations.shape == (2,)
    # JSON output data: tritonclient hands the strings back as str (binary output would be bytes).
    assert all(isinstance(text, str) and text for text in translations)
    response = result.get_response()
    assert response["model_name"] == "zh_en" and response["model_version"] == "1.0-int8"
    assert response["id"] == "req-1"
    parameters = response["parameters"]
    assert parameters["variant"] == "int8" and parameters["standin"] is True and parameters["notice"]

    # Without named outputs tritonclient asks for binary output; a JSON answer is read all the same.
    plain = triton_client.infer("zh_en", [texts_input(["你好"])], headers=auth(server))
    assert plain.as_numpy("translation") is not None


def test_v2_errors_reach_tritonclient_with_status_and_message(
    server: TorchServe, triton_client: triton.InferenceServerClient
) -> None:
    too_many = ["你好"] * (HandlerConfig().max_texts_per_request + 1)
    with pytest.raises(InferenceServerException) as caught:
        triton_client.infer("zh_en", [texts_input(too_many)], headers=auth(server))
    assert caught.value.status() == "413" and "max_texts_per_request" in caught.value.message()

    binary = triton.InferInput("text", [1], "BYTES")
    binary.set_data_from_numpy(np.array(["你好"], dtype=object))  # binary_data=True, the default
    with pytest.raises(InferenceServerException) as caught:
        triton_client.infer("zh_en", [binary], headers=auth(server))
    assert caught.value.status() == "400"


def test_v2_and_v1_with_plain_json(server: TorchServe) -> None:
    response = post(server, V2_PATH, v2_body("你好", "谢谢", id="abc", parameters={"num_beams": 1}))
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"model_name", "model_version", "id", "outputs", "parameters"}
    assert body["id"] == "abc"
    (output,) = body["outputs"]
    assert output["name"] == "translation" and output["datatype"] == "BYTES" and output["shape"] == [2]
    assert len(output["data"]) == 2 and all(isinstance(text, str) for text in output["data"])
    assert "id" not in post(server, V2_PATH, v2_body("你好")).json()

    v1 = post(server, V1_PATH, {"instances": ["你好", {"text": "谢谢"}], "parameters": {"num_beams": 1}})
    assert v1.status_code == 200, v1.text
    assert len(v1.json()["predictions"]) == 2 and v1.json()["standin"] is True

    # Greedy decoding is deterministic: every door gives the same translation of the same text.
    native = server.client.translate(["你好", "谢谢"], num_beams=1).json()["translations"]
    assert output["data"] == native == v1.json()["predictions"]


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        (V2_PATH, {"inputs": []}, 400, "exactly one tensor"),
        (V2_PATH, {"inputs": [{"datatype": "FP32"}]}, 400, "lacks"),
        (
            V2_PATH,
            {"inputs": [{"name": "t", "shape": [2], "datatype": "BYTES", "data": ["一"]}]},
            400,
            "shape",
        ),
        (V2_PATH, {"inputs": [{"name": "t", "shape": [1], "datatype": "INT32", "data": [1]}]}, 400, "BYTES"),
        (V2_PATH, v2_body("你好", parameters={"num_beams": 99}), 422, "num_beams"),
        (V2_PATH, v2_body("你好", parameters={"beams": 2}), 400, "unknown parameter"),
        (V2_PATH, v2_body(""), 400, "empty"),
        (V1_PATH, {"instances": [1]}, 400, "instances[0]"),
        (V1_PATH, {"instances": ["你好"], "parameters": {"max_new_tokens": 0}}, 422, "max_new_tokens"),
    ],
)
def test_errors_use_the_protocol_error_shape(
    server: TorchServe, path: str, body: Any, status: int, fragment: str
) -> None:
    response = post(server, path, body)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    assert set(response.json()) == {"error"} and fragment in response.json()["error"]


def test_limits_are_those_of_predictions(server: TorchServe) -> None:
    """The same over-limit request gets the same status and message on every door."""
    config = HandlerConfig()
    over_limit = [
        ["你好"] * (config.max_texts_per_request + 1),
        ["你" * (config.max_chars_per_text + 1)],
        [""],
    ]
    for texts in over_limit:
        native = server.client.translate(texts)
        v2 = post(server, V2_PATH, v2_body(*texts))
        v1 = post(server, V1_PATH, {"instances": texts})
        assert native.status_code == v2.status_code == v1.status_code >= 400, native.text
        assert native.json()["message"] == v2.json()["error"] == v1.json()["error"]


def test_what_the_protocol_routes_do_not_serve(server: TorchServe) -> None:
    base, headers = server.client.endpoints.inference, auth(server)
    # A body that names no protocol is our native request, on any route; undecodable JSON gets the
    # native error: the handler sees the body, not the route.
    native = post(server, V2_PATH, {"text": "你好"})
    assert native.status_code == 200 and "translation" in native.json()
    broken = requests.post(
        f"{base}{V2_PATH}", data=b"{", headers={**headers, "Content-Type": "application/json"}, timeout=60
    )
    assert broken.status_code == 400 and broken.json()["type"] == "InvalidRequest"
    # TorchServe serves neither versioned OIP routes nor the v2 metadata and health routes.
    for method, path in (
        ("POST", "/v2/models/zh_en/versions/1.0-int8/infer"),
        ("GET", "/v2/models/zh_en"),
        ("GET", "/v2/health/ready"),
    ):
        response = requests.request(method, f"{base}{path}", json=v2_body("你"), headers=headers, timeout=60)
        assert response.status_code == 404, (path, response.text)
    assert post(server, "/v2/models/nosuch/infer", v2_body("你")).json()["type"] == "ModelNotFoundException"
    assert server.client.ping().json() == {"status": "Healthy"}
