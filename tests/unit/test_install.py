"""The install path: torch's CPU build only, runtime-only serving installs, old Pythons turned away."""

from __future__ import annotations

import http.server
import platform
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from archive.tatoeba import REPO_ROOT
from scripts import check_python, install_torch

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def dry_run(target: str) -> str:
    """The commands make would run for target in a venv that does not exist yet."""
    done = subprocess.run(
        ["make", "-n", "VENV=/nonexistent/venv", target], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the +cpu local version is x86_64's")
def test_the_venv_asks_for_the_cpu_build_which_no_cuda_wheel_can_satisfy() -> None:
    commands = dry_run("/nonexistent/venv/.runtime")
    assert "check_python.py" in commands
    assert f"install_torch.py --spec 'torch==2.13.0+cpu' --index {CPU_INDEX}" in commands


def test_serving_installs_runtime_dependencies_only() -> None:
    for target in ("archives", "serve", "fleet"):
        commands = dry_run(target)
        uv = "uv pip install --python /nonexistent/venv/bin/python --quiet --compile-bytecode -e . ||"
        assert uv in commands, target
        assert "pip install --quiet -e .\n" in commands, target  # pip, where uv cannot reach PyPI
        assert "pip install --quiet --target build/uv uv==" in commands, target  # the image copies .venv only
        assert ".[dev]" not in commands, target
    assert "-e '.[dev]'" in dry_run("test")
    assert "-e '.[dev]'" in dry_run("bench")


def test_an_unsupported_python_is_told_how_to_get_a_supported_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check_python.main() == 0
    monkeypatch.setattr(check_python, "SUPPORTED", "3.99")
    assert check_python.main() == 1
    advice = capsys.readouterr().err
    assert "Python 3.99 is required" in advice
    for host in ("Debian 12", "Ubuntu 22.04/24.04", "Amazon Linux 2023", "uv python install"):
        assert host in advice
    assert "PYTHON=" in advice


@pytest.fixture
def index_url() -> Iterator[str]:
    """A loopback stand-in for the CPU index that answers HEAD."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_cpu_index_is_added_only_when_it_answers(index_url: str) -> None:
    assert install_torch.answers(f"{index_url}/torch/", timeout=2)
    assert not install_torch.answers(f"http://127.0.0.1:{closed_port()}/whl/cpu/torch/", timeout=2)
    spec = "torch==2.13.0+cpu"
    assert install_torch.pip_command(spec, index_url)[-4:] == [
        "--no-compile",
        spec,
        "--extra-index-url",
        index_url,
    ]
    assert "--extra-index-url" not in install_torch.pip_command(spec, None)


def test_an_installed_cpu_build_is_kept(capsys: pytest.CaptureFixture[str]) -> None:
    installed = install_torch.installed_version("torch")
    assert installed is not None
    unreachable = f"http://127.0.0.1:{closed_port()}/whl/cpu"
    assert install_torch.main(["--spec", f"torch=={installed}", "--index", unreachable]) == 0
    assert capsys.readouterr().out == f"torch {installed} is installed\n"
