"""The production config's doors, checked on a real server started from it (ports changed, hosts kept)."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import time
from pathlib import Path

import psutil
import pytest
import requests

from serving.client import ServerError
from serving.torchserve import PRODUCTION_CONFIG, TorchServe

pytestmark = pytest.mark.e2e


def production_settings() -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z_.]+)=(.*)$", PRODUCTION_CONFIG.read_text(), flags=re.MULTILINE))


def test_production_config_states_the_secure_defaults() -> None:
    settings = production_settings()
    assert settings["disable_token_authorization"] == "false"
    for key in ("management_address", "metrics_address"):
        assert settings[key].startswith("http://127.0.0.1:"), key
    for key in ("grpc_inference_address", "grpc_management_address"):
        assert settings[key] == "127.0.0.1", key
    assert settings["enable_envvars_config"] == "false"
    assert "http" not in settings["allowed_urls"]


def test_requests_without_or_with_a_wrong_token_are_rejected(server: TorchServe) -> None:
    endpoints = server.client.endpoints
    body = {"text": "你好"}
    for headers in ({}, {"Authorization": "Bearer not-the-key"}):
        for method, url in (
            ("POST", f"{endpoints.inference}/predictions/zh_en"),
            ("GET", f"{endpoints.inference}/ping"),
            ("GET", f"{endpoints.management}/models"),
        ):
            response = requests.request(method, url, json=body, headers=headers, timeout=30)
            assert response.status_code in (400, 401), (url, headers, response.status_code)
            assert "Token Authorization failed" in response.text
    # The inference key does not open the management API.
    inference_key = json.loads(server.key_file.read_text())["inference"]["key"]
    response = requests.get(
        f"{endpoints.management}/models", headers={"Authorization": f"Bearer {inference_key}"}, timeout=30
    )
    assert response.status_code in (400, 401)
    # TorchServe does not put the metrics API behind a token: loopback is its only protection.
    assert requests.get(f"{endpoints.metrics}/metrics", timeout=30).status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/zh_en_fp32.mar",
        "https://example.com/zh_en_fp32.mar",
        "file:///etc/passwd",
        "../zh_en_fp32.mar",
    ],
)
def test_registering_from_a_url_or_outside_the_store_is_refused(server: TorchServe, url: str) -> None:
    with pytest.raises(ServerError, match=r"(?s)-> 404: .*(does not match any allowed URL|Relative path)"):
        server.client.register(url)


def test_an_absolute_path_outside_the_store_is_refused(server: TorchServe, tmp_path: Path) -> None:
    outside = tmp_path / "outside.mar"
    shutil.copy(server.model_store / "zh_en_fp32.mar", outside)
    with pytest.raises(ServerError, match="Model not found"):
        server.client.register(str(outside))
    assert server.client.versions() == ["1.0-int8"]


def listening_ports(pid: int) -> dict[int, str]:
    return {
        conn.laddr.port: conn.laddr.ip
        for conn in psutil.Process(pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }


def test_only_the_inference_port_may_leave_loopback(server: TorchServe) -> None:
    java = server.java_pid()
    assert java is not None
    ports = server.ports
    expected = {
        ports.management,
        ports.metrics,
        ports.grpc_inference,
        ports.grpc_management,
        ports.inference,
    }
    # The gRPC listeners bind after the HTTP ones that readiness waits for: give them 30 s to appear.
    deadline = time.monotonic() + 30
    while not expected <= set(listening := listening_ports(java)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(listening) == expected
    for port, ip in listening.items():
        address = ipaddress.ip_address(ip)
        mapped = getattr(address, "ipv4_mapped", None) or address
        assert mapped.is_loopback, f"port {port} listens on {ip}"


def test_oversized_body_is_refused_before_the_model(server: TorchServe) -> None:
    limit = int(production_settings()["max_request_size"])
    body = json.dumps({"text": "你" * limit}).encode()
    response = server.client.post_raw(body, "application/json")
    # Netty refuses it while reading: TorchServe's frontend sends a bare 413, no JSON and no worker involved.
    assert response.status_code == 413
    assert server.client.translate("你好").status_code == 200
