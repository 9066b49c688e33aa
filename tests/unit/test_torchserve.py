"""Temp dirs, configs and time limits for TorchServes that run side by side on one host (the fleet,
the tests), and HTTP over the unix socket a replica's management API listens on."""

from __future__ import annotations

import http.server
import json
import socketserver
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from serving.client import Endpoints, ServerError, TorchServeClient
from serving.ports import Ports
from serving.replica_set import REPLICA_CONFIG
from serving.torchserve import (
    MANAGEMENT_SOCKET,
    PRODUCTION_CONFIG,
    SOCKET_PATH_MAX,
    TorchServe,
    make_private_dir,
    render_config,
    socket_dir_for,
)
from serving.unix_http import unix_url


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_socket_dir_is_the_server_tmpdir_unless_its_path_is_too_long(tmp_path: Path) -> None:
    assert socket_dir_for(tmp_path) == tmp_path
    deep = tmp_path / ("d" * 100)
    short = socket_dir_for(deep)
    assert short != deep and len(str(short / MANAGEMENT_SOCKET)) <= SOCKET_PATH_MAX
    assert len(str(short / ".ts.sock.65535")) <= SOCKET_PATH_MAX
    # The same name every time: `make fleet-stop` in another process finds the socket again.
    assert socket_dir_for(deep) == short and socket_dir_for(tmp_path / ("e" * 100)) != short


def test_private_dirs_are_0700_and_a_planted_one_is_refused(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    make_private_dir(fresh)
    assert mode(fresh) == 0o700
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    make_private_dir(wide)
    assert mode(wide) == 0o700
    planted = tmp_path / "planted"
    planted.symlink_to(fresh)
    with pytest.raises(PermissionError, match="remove it, then start again"):
        make_private_dir(planted)


def settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_a_replica_config_gets_its_management_socket_and_production_keeps_its_port(tmp_path: Path) -> None:
    ports = Ports.free()
    socket = tmp_path / "tmp" / MANAGEMENT_SOCKET
    replica = settings(render_config(REPLICA_CONFIG, ports, tmp_path, management_socket=socket))
    assert replica["management_address"] == f"unix:{socket}"
    assert replica["use_native_io"] == "true"
    with pytest.raises(ValueError, match="pass management_socket"):
        render_config(REPLICA_CONFIG, ports, tmp_path)
    production = settings(render_config(PRODUCTION_CONFIG, ports, tmp_path, management_socket=socket))
    assert production["management_address"] == f"http://127.0.0.1:{ports.management}"


def test_a_replica_server_talks_to_management_over_its_socket(tmp_path: Path) -> None:
    replica = TorchServe(tmp_path / "store", tmp_path / "r1", models=(), base_config=REPLICA_CONFIG)
    assert replica.management_socket == replica.socket_dir / MANAGEMENT_SOCKET
    assert replica.client.endpoints.management == unix_url(str(replica.management_socket))
    assert mode(replica.socket_dir) == 0o700 and mode(replica.tmpdir) == 0o700
    single_host = TorchServe(tmp_path / "store", tmp_path / "single", models=())
    assert single_host.management_socket is None
    assert single_host.client.endpoints.management.startswith("http://127.0.0.1:")


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = (200, {"models": [{"modelName": "zh_en"}]}) if self.path == "/models" else (404, {})
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def unix_server(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "m.sock"
    server = _UnixHTTPServer(str(path), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.shutdown()
    server.server_close()


def test_the_client_speaks_http_over_a_unix_socket(unix_server: Path, tmp_path: Path) -> None:
    client = TorchServeClient(Endpoints(management=unix_url(str(unix_server))), timeout=5)
    assert client.models() == ["zh_en"]
    assert client.models() == ["zh_en"]  # again, on the kept-alive connection
    with pytest.raises(ServerError, match="404"):
        client.default_version()
    nowhere = TorchServeClient(Endpoints(management=unix_url(str(tmp_path / "none.sock"))), timeout=5)
    with pytest.raises(requests.ConnectionError, match=r"none\.sock"):
        nowhere.models()


class _HangingLauncher(TorchServe):
    """A real process in the launcher's place that never returns, as a wedged `torchserve` would."""

    def command(self, *args: str) -> list[str]:
        return ["sleep", "60"]


def test_start_and_stop_give_up_on_a_hanging_launcher_and_remove_the_socket_dir(tmp_path: Path) -> None:
    server = _HangingLauncher(tmp_path / "store", tmp_path / ("w" * 100), models=())
    assert server.socket_dir != server.tmpdir and mode(server.socket_dir) == 0o700
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="did not return within 1s"):
        server.start(timeout=5, launch_timeout=1)
    began_stop = time.monotonic()
    server.stop(timeout=1, stop_command_timeout=1)
    assert began_stop - began < 5 and time.monotonic() - began_stop < 5
    assert not server.socket_dir.exists() and not server.tmpdir.exists()
