"""The image we ship, served beside `make serve` on the same host: a Locust run against the container.

    make image MODEL=synthetic          # zh-en-torchserve:standin: the full-size stand-in, built by podman
    python -m bench.run_all --loads int8:4:100 image:4:100

The image runs as built: its own archives (unpacked, the shipped yaml, the C kernels its build stage
compiled), `podman run` publishing 8080 on 127.0.0.1 only, TorchServe's key read from the container.
Its sentence cache is on as shipped; the load sends unique sentences, so it answers none of them.
The result is written like `make serve`'s (bench.load), labelled load-image-..., with the C kernel path
the container's worker logged (`cpu_kernels=`), so the two are compared in one run on one host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bench.cli import Progress
from bench.common import write_result
from bench.cpu_account import tree_role
from bench.load import LoadSpec, load_label, run_load
from serving.ports import free_port

IMAGE = "zh-en-torchserve:standin"
say = Progress("image_peer")


class ImageUnavailable(RuntimeError):
    """No podman, or no image to run: our other figures stand without it."""


@dataclass(frozen=True)
class Container:
    name: str
    url: str
    key_file: Path

    def log(self) -> str:
        """The container's output and the worker's log inside it (TorchServe's model_log.log)."""
        outside = subprocess.run(["podman", "logs", self.name], capture_output=True, text=True, check=False)
        inside = _podman("exec", self.name, "sh", "-c", "cat logs/model_log.log 2>/dev/null || true")
        return outside.stdout + outside.stderr + inside

    def pids(self) -> list[int]:
        """The container's first process, as the host sees it (bench.load reads its tree's memory)."""
        return [int(_podman("inspect", "--format", "{{.State.Pid}}", self.name).strip())]


def _podman(*args: str) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, check=False, timeout=120)
    if done.returncode:
        raise ImageUnavailable(f"podman {' '.join(args[:2])}: {done.stderr.strip()[-500:]}")
    return done.stdout


@contextmanager
def running(workdir: Path, image: str = IMAGE, timeout: float = 300) -> Iterator[Container]:
    """The image in a container of its own on a free loopback port, until /ping answers; always removed."""
    try:
        _podman("image", "exists", image)
    except (ImageUnavailable, FileNotFoundError) as error:
        raise ImageUnavailable(
            f"no {image} to run ({error}): build it with `make image MODEL=synthetic`"
        ) from error
    name, port = f"zh_en_bench_image_{os.getpid()}", free_port()
    _podman("run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8080", image)
    try:
        container = Container(name, f"http://127.0.0.1:{port}", workdir / "key_file.json")
        _wait_until_serving(container, time.monotonic() + timeout)
        yield container
    finally:
        subprocess.run(["podman", "rm", "--force", name], capture_output=True, check=False, timeout=120)


def _wait_until_serving(container: Container, deadline: float) -> None:
    while True:
        keys = subprocess.run(
            ["podman", "exec", container.name, "cat", "key_file.json"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if '"inference"' in keys:
            container.key_file.write_text(keys)
            break
        if time.monotonic() > deadline:
            raise ImageUnavailable(f"the container wrote no key_file.json: {container.log()[-1500:]}")
        time.sleep(0.5)
    token = json.loads(keys)["inference"]["key"]
    while time.monotonic() < deadline:
        try:
            ping = requests.get(
                f"{container.url}/ping", headers={"Authorization": f"Bearer {token}"}, timeout=5
            )
            if ping.status_code == 200 and ping.json().get("status") == "Healthy":
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise ImageUnavailable(f"the container never answered /ping Healthy: {container.log()[-1500:]}")


def run_image_load(
    beams: int, users: int, duration: str, model_dir: Path, results: Path, command: str
) -> dict[str, Any]:
    """One Locust run against the image, written like ours (bench.load) with the worker's kernel path."""
    label = load_label("image", beams, users)
    with tempfile.TemporaryDirectory(prefix="zh_en_image_") as workdir, running(Path(workdir)) as container:
        say(f"{IMAGE} serving at {container.url}")
        spec = LoadSpec(
            container.url,
            users=users,
            spawn_rate=users,
            duration=duration,
            num_beams=beams,
            key_file=container.key_file,
            label=label,
        )
        summary = run_load(
            spec,
            results,
            model_dir,
            command,
            serving_pids=container.pids,
            cpu_roles=tree_role("the container", container.pids),
        )
        paths = re.findall(r"cpu_kernels=(\w+)", container.log())
    summary = {
        **summary,
        "variant": "int8 (image)",
        "image": IMAGE,
        "cpu_kernels": paths[-1] if paths else "unknown",
    }
    write_result(label, summary, results, command)
    return summary
