"""`make image`'s decision, without building: deploy/image/build.sh --plan (archive/image_plan.py).

An image never ships the stand-in by accident: the stand-in only when asked for (MODEL=synthetic),
tagged and labeled as such; the hub model only at its pinned commit and only when the hub answers;
otherwise a refusal that names both other choices. Runs in `make test` (no podman, no network).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from archive.hub import COMMIT, DEFAULT_MODEL, DEFAULT_REVISION
from archive.tatoeba import REPO_ROOT
from serving.ports import free_port

BUILD = REPO_ROOT / "deploy" / "image" / "build.sh"


def plan(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("MODEL", "IMAGE", "HF_ENDPOINT")}
    return subprocess.run(
        [str(BUILD), "--plan"], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def assignments(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The plan as bash evaluates it: each variable, arrays joined by newlines."""
    script = (
        'eval "$1"; printf "%s\\n" "$IMAGE" "$BUILD_MODEL" "$BUILD_STRICT"; '
        'printf "L%s\\n" "${LABELS[@]}" "${MODEL_VOLUMES[@]}"'
    )
    out = subprocess.run(
        ["bash", "-c", script, "plan", done.stdout], capture_output=True, text=True, check=True
    )
    lines = out.stdout.splitlines()
    rest = [line[1:] for line in lines[3:]]
    return {
        "IMAGE": lines[0],
        "BUILD_MODEL": lines[1],
        "BUILD_STRICT": lines[2],
        "labels": "\n".join(arg for arg in rest if arg.startswith("--label=")),
        "volumes": "\n".join(arg for arg in rest if arg.startswith("--volume=")),
    }


@pytest.fixture
def listening_hub() -> Iterator[str]:
    """A local port that accepts connections, standing in for a reachable hub."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_the_pinned_revision_is_a_commit_not_a_branch() -> None:
    assert COMMIT.fullmatch(DEFAULT_REVISION), DEFAULT_REVISION


def test_synthetic_is_tagged_and_labeled_a_standin() -> None:
    done = plan(MODEL="synthetic")
    assert done.returncode == 0, done.stderr
    chosen = assignments(done)
    assert chosen["IMAGE"] == "zh-en-torchserve:standin" and chosen["BUILD_MODEL"] == "synthetic"
    assert "--label=io.zh-en.standin=true" in chosen["labels"].splitlines()
    assert "STAND-IN" in chosen["labels"]


def test_a_standin_under_another_tag_is_refused() -> None:
    done = plan(MODEL="synthetic", IMAGE="zh-en-torchserve:1.0.0")
    assert done.returncode == 2 and "its tag must say so" in done.stderr


def test_without_the_hub_the_default_build_stops_and_names_both_choices() -> None:
    done = plan(HF_ENDPOINT=f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert done.returncode == 2 and not done.stdout
    assert "cannot reach the Hugging Face hub" in done.stderr
    assert "MODEL=/path/to/model_dir" in done.stderr and "MODEL=synthetic" in done.stderr
    assert DEFAULT_REVISION in done.stderr


def test_with_the_hub_the_model_is_built_strictly_at_the_pinned_commit(listening_hub: str) -> None:
    done = plan(HF_ENDPOINT=listening_hub)
    assert done.returncode == 0, done.stderr
    chosen = assignments(done)
    assert chosen["IMAGE"] == "zh-en-torchserve" and chosen["BUILD_MODEL"] == DEFAULT_MODEL
    assert chosen["BUILD_STRICT"] == "1"
    labels = chosen["labels"].splitlines()
    assert f"--label=io.zh-en.model={DEFAULT_MODEL}@{DEFAULT_REVISION}" in labels
    assert "--label=io.zh-en.standin=false" in labels
    assert plan(HF_ENDPOINT=listening_hub, IMAGE="zh-en-torchserve:standin").returncode == 2


def test_a_local_model_directory_is_mounted_read_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    done = plan(MODEL=str(tiny_model_dir), HF_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 0, done.stderr  # no hub needed
    chosen = assignments(done)
    assert chosen["BUILD_MODEL"] == "/srv/model-source" and chosen["BUILD_STRICT"] == "1"
    assert chosen["volumes"] == f"--volume={tiny_model_dir.resolve()}:/srv/model-source:ro"
    empty = plan(MODEL=str(tmp_path))
    assert empty.returncode == 2 and "not a MarianMT model directory" in empty.stderr


def test_make_image_passes_model_and_no_fallback_switch() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "image", "MODEL=synthetic"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "MODEL=synthetic deploy/image/build.sh"
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "ARG STRICT=1\n" in dockerfile  # a plain `docker build` without the hub fails too
