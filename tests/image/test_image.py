"""The container image, built by podman and run: `make image-test` (about 6 minutes; not in `make test`).

Builds the Dockerfile from a clean clone of HEAD with deploy/image/build.sh (MODEL=synthetic: the
offline stand-in), runs it on 127.0.0.1, sends it the README's request, checks what the image holds
and stops it with a request in flight. Prints the figures docs/DEPLOYMENT.md reports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from archive.tatoeba import REPO_ROOT
from serving.ports import free_port
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(os.environ.get("ZH_EN_IMAGE_TEST") != "1", reason="make image-test runs it"),
]

IMAGE = "zh-en-torchserve:standin"
NAME = "zh_en_image_test"
DEV_ONLY = ("pytest", "locust", "ctranslate2", "matplotlib", "schemathesis", "hypothesis", "ruff", "mypy")


def podman(*args: str, check: bool = True) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def container_log() -> str:
    """`podman logs` writes the container's stderr (where serving.graceful reports) to its own stderr."""
    done = subprocess.run(["podman", "logs", NAME], capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def built() -> float:
    began = time.monotonic()
    subprocess.run(
        [str(REPO_ROOT / "deploy" / "image" / "build.sh")],
        check=True,
        env={**os.environ, "MODEL": "synthetic"},
    )
    return time.monotonic() - began


@dataclass(frozen=True)
class Running:
    url: str
    key: str
    seconds: dict[str, float]  # build, then /ping Healthy and the first translation after `podman run`


@pytest.fixture(scope="module")
def container(built: float) -> Iterator[Running]:
    podman("rm", "--force", NAME, check=False)
    port = free_port()
    began = time.monotonic()
    podman("run", "--detach", "--name", NAME, "--publish", f"127.0.0.1:{port}:8080", IMAGE)
    url, figures = f"http://127.0.0.1:{port}", {"build_s": built}
    try:

        def key_file() -> str:
            text = podman("exec", NAME, "cat", "key_file.json", check=False)
            return text if "inference" in text else ""

        key = json.loads(wait_until(key_file, 300, container_log, 0.5))["inference"]["key"]
        headers = {"Authorization": f"Bearer {key}"}

        def pinged() -> bool:
            try:
                return requests.get(f"{url}/ping", headers=headers, timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_until(pinged, 300 - (time.monotonic() - began), container_log, 0.5)
        figures["ping_s"] = time.monotonic() - began
        response = requests.post(
            f"{url}/predictions/zh_en", json={"text": "汤姆不会同意的"}, headers=headers, timeout=120
        )
        figures["first_translation_s"] = time.monotonic() - began
        assert response.status_code == 200, response.text
        assert response.json()["standin"] is True and response.json()["variant"] == "int8"
        yield Running(url, key, figures)
    finally:
        podman("rm", "--force", NAME, check=False)


def test_the_image_answers_the_readme_request_and_holds_runtime_only(container: Running) -> None:
    figures = container.seconds
    packages = podman("exec", NAME, ".venv/bin/pip", "list", "--format", "freeze").lower()
    assert "torch==2.13.0+cpu" in packages
    assert not [name for name in DEV_ONLY if f"\n{name}==" in f"\n{packages}"]
    assert "nvidia" not in packages and "triton" not in packages
    assert podman("exec", NAME, ".venv/bin/python", "-m", "serving.health").startswith("healthy")
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).strip())
    standin = podman("image", "inspect", "--format", '{{ index .Labels "io.zh-en.standin" }}', IMAGE)
    assert standin.strip() == "true"  # MODEL=synthetic: tagged :standin and labeled as such
    print(
        f"image {size / 1e9:.2f} GB; build {figures['build_s']:.0f} s; /ping {figures['ping_s']:.1f} s and "
        f"first translation {figures['first_translation_s']:.1f} s after podman run"
    )


def test_the_worker_runs_c_kernels_that_the_build_stage_compiled(container: Running) -> None:
    """The archives carry the kernels' library (make kernels in the build stage), the runtime stage
    has no compiler, and the worker's load line names the C kernel path it chose from CPUID."""
    compilers = podman("exec", NAME, "sh", "-c", "command -v cc gcc || true").strip()
    assert compilers == "", f"the runtime image holds a compiler: {compilers}"
    model_log = podman("exec", NAME, "sh", "-c", "cat logs/model_log.log 2>/dev/null || true")
    worker_log = container_log() + model_log
    paths = re.findall(r"cpu_kernels=(\w+)", worker_log)
    assert paths, worker_log[-2000:]
    assert "torch" not in paths and "C kernels not loaded" not in worker_log, worker_log[-2000:]
    print(f"the image's worker runs the C kernels' {paths[-1]} path")


def test_stop_drains_a_request_in_flight(container: Running) -> None:
    url, headers = container.url, {"Authorization": f"Bearer {container.key}"}
    answers: list[int] = []
    document = {"text": "我们明天早上去公园散步。" * 40, "num_beams": 4}
    sender = threading.Thread(
        target=lambda: answers.append(
            requests.post(f"{url}/predictions/zh_en", json=document, headers=headers, timeout=120).status_code
        )
    )
    sender.start()
    time.sleep(0.5)
    began = time.monotonic()
    podman("stop", "--time", "45", NAME)
    stopped = time.monotonic() - began
    sender.join(120)
    assert answers == [200]
    state = podman("inspect", "--format", "{{.State.ExitCode}}", NAME).strip()
    logs = container_log()
    assert state == "0" and "drained after" in logs, logs[-2000:]
    print(f"podman stop: {stopped:.1f} s with a 40-sentence request in flight, exit 0, answered 200")
