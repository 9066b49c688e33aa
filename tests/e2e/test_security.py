"""The production config's doors, checked on a real server started from it (ports changed, hosts kept)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import stat
from pathlib import Path

import psutil
import pytest
import requests

from serving.client import ServerError
from serving.processes import wait_gone
from serving.replica_set import REPLICA_CONFIG
from serving.torchserve import MANAGEMENT_SOCKET, PRODUCTION_CONFIG, REPO_ROOT, TorchServe
from tests.waiting import wait_until

KUBERNETES_CONFIG = REPO_ROOT / "config" / "config.kubernetes.properties"

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


# What a register call could name: remote archives, local files, and paths that look like the store.
URLS_TO_REFUSE = (
    "http://127.0.0.1:9/zh_en_fp32.mar",
    "https://example.com/zh_en_fp32.mar",
    "HTTPS://EXAMPLE.COM/x.mar",
    "file:///etc/passwd",
    "file:///srv/zh_en/model_store/zh_en_fp32.mar",
    "s3://bucket/zh_en_fp32.mar",
    "ftp://example.com/zh_en_fp32.mar",
    "zh_en_fp32.mar",
)


@pytest.mark.parametrize(
    "config", [PRODUCTION_CONFIG, REPLICA_CONFIG, KUBERNETES_CONFIG], ids=lambda p: p.name
)
def test_allowed_urls_matches_no_url_at_all(config: Path) -> None:
    """TorchServe registers a URL only if one of the comma-separated patterns matches it whole,
    ignoring case (ModelArchive: Pattern.CASE_INSENSITIVE, matches()); `.*` or `https?://.*`
    would pass a check for the word "http"."""
    found = re.search(r"^allowed_urls=(.*)$", config.read_text(), flags=re.MULTILINE)
    assert found is not None, f"{config.name} must state allowed_urls (its default admits every URL)"
    patterns = [re.compile(pattern, re.IGNORECASE) for pattern in found.group(1).split(",")]
    for url in URLS_TO_REFUSE:
        assert not [p.pattern for p in patterns if p.fullmatch(url)], url


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
    listening = wait_until(
        lambda: _all_of(expected, listening_ports(java)), 30, lambda: listening_ports(java), 0.2
    )
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


def test_a_replica_management_api_is_a_private_unix_socket(tiny_store: Path, tmp_path: Path) -> None:
    """No token on a replica (auth is at the front door): its management API must be on no port."""
    replica = TorchServe(tiny_store, tmp_path / "r1", models=(), base_config=REPLICA_CONFIG)
    socket = replica.socket_dir / MANAGEMENT_SOCKET
    try:
        replica.start(timeout=120)
        assert socket.is_socket() and replica.management_socket == socket
        assert stat.S_IMODE(replica.socket_dir.stat().st_mode) == 0o700
        assert replica.client.models() == []  # no key, over the socket
        java = replica.java_pid()
        assert java is not None
        ports = replica.ports
        expected = {ports.inference, ports.metrics, ports.grpc_inference, ports.grpc_management}
        listening = wait_until(
            lambda: _all_of(expected, listening_ports(java)), 30, lambda: listening_ports(java), 0.2
        )
        assert set(listening) == expected  # the management port is not among them
        # A killed replica leaves its socket file behind; starting again must not trip over it.
        os.kill(java, signal.SIGKILL)
        assert wait_gone([java], timeout=60) == []
        assert socket.exists()
        replica.start(timeout=120)
        assert replica.client.models() == []
    finally:
        replica.stop()
    assert not replica.socket_dir.exists()


def _all_of(expected: set[int], listening: dict[int, str]) -> dict[int, str]:
    """`listening` once every expected port is in it, else nothing (wait_until asks again)."""
    return listening if expected <= set(listening) else {}
