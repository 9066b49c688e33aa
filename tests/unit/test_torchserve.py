"""Temp dirs for TorchServes that run side by side on one host (the fleet, the tests)."""

from __future__ import annotations

from pathlib import Path

from serving.torchserve import socket_dir_for


def test_socket_dir_is_the_server_tmpdir_unless_its_path_is_too_long(tmp_path: Path) -> None:
    assert socket_dir_for(tmp_path) == tmp_path
    deep = tmp_path / ("d" * 100)
    short = socket_dir_for(deep)
    assert short != deep and short.is_dir() and len(str(short / ".ts.sock.65535")) <= 107
