"""docs/openapi.yaml against a live server: schemathesis generates requests from the spec, bounded.

Checks: no 5xx, and every response is one the spec documents (status code, content type, body
schema). After the run the server must still be healthy and translate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from serving.client import read_key
from serving.torchserve import TorchServe
from tests.unit.test_openapi_spec import SPEC, operations, validator

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=41)]

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
# Bounded: a fixed seed and example budget, no stateful phase (the API has no resources to link),
# no example database (every run the same, nothing written to .hypothesis/).
CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20261122,
        "generation": {"max-examples": 25, "database": "none"},
        "phases": {"stateful": {"enabled": False}},
    }
)
# TorchServe's routes; LibreTranslate's live at the front door only (tests/e2e/test_libretranslate.py
# runs them through schemathesis there).
schema = schemathesis.openapi.from_path(SPEC_PATH, config=CONFIG).exclude(tag="libretranslate")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# config.properties' max_request_size: TorchServe answers a larger body itself with a bare 413 before
# any worker reads it (docs/API.md, "Errors"); the front door gives that one our JSON shape. 128 texts
# of 5,000 characters can exceed it.
MAX_BODY = 131072


def auth(server: TorchServe) -> dict[str, str]:
    return {"Authorization": f"Bearer {read_key(server.key_file, 'inference')}"}


@schema.parametrize()
def test_the_server_keeps_the_contract(case: schemathesis.Case[Any], server: TorchServe) -> None:
    response = case.call(base_url=server.client.endpoints.inference, headers=auth(server), timeout=120)
    body = response.request.body or b""
    if len(body.encode() if isinstance(body, str) else body) > MAX_BODY:
        assert response.status_code == 413, "TorchServe's own answer to a body over max_request_size"
        return
    case.validate_response(response, checks=CHECKS)


def test_the_server_is_healthy_after_the_run(server: TorchServe) -> None:
    assert server.client.ping().json() == {"status": "Healthy"}
    response = server.client.translate("汤姆不会同意的")
    assert response.status_code == 200 and response.json()["translation"]


@pytest.mark.parametrize(
    ("method", "path"), [(method.upper(), path) for path, method, _ in operations(front_door=False)]
)
def test_without_the_key_every_route_answers_the_documented_400(
    server: TorchServe, method: str, path: str
) -> None:
    url = server.client.endpoints.inference + path.replace("{version}", "1.0-int8")
    response = requests.request(method, url, json={"text": "你好"}, timeout=30)
    assert response.status_code == 400 and "400" in SPEC["paths"][path][method.lower()]["responses"]
    validator("components/schemas/Error").validate(response.json())
    assert response.json()["type"] == "InvalidKeyException"
