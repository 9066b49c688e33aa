"""What `make image` builds from MODEL: the model argument, tag, labels and mounts, or a refusal.

    MODEL=synthetic IMAGE= python3 -m archive.image_plan    # shell assignments for build.sh

deploy/image/build.sh evaluates the output; this module decides so that the decision can be tested
without podman. An image never ships the stand-in by accident:
- MODEL=synthetic: the stand-in (random weights), tagged `...:standin` (a tag without "standin" is
  refused) and labeled `io.zh-en.standin=true`;
- MODEL=<local model directory>: mounted read-only into the build, which fails rather than fall back;
- MODEL=<hub id> (the default): downloaded at archive.hub.DEFAULT_REVISION, and only when the hub
  answers now; otherwise the build stops with a message naming the two other choices. The build
  itself runs with STRICT=1, so a hub that fails mid-download fails the build too.
Standard library only: it runs with the host's python3.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from archive.hub import DEFAULT_MODEL, DEFAULT_REVISION, REQUIRED_FILES, SYNTHETIC, hub_reachable, hub_url

IMAGE_NAME = "zh-en-torchserve"
STANDIN_TAG = f"{IMAGE_NAME}:standin"
# Where a local model directory is mounted for the build (podman build --volume ...:ro).
MOUNTED_MODEL = "/srv/model-source"


class ImagePlanError(RuntimeError):
    """No image should be built; the message says what to pass instead."""


@dataclass(frozen=True)
class ImagePlan:
    tag: str
    model_arg: str  # the Dockerfile's MODEL build argument
    standin: bool
    model_label: str
    volumes: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """Bash assignments: IMAGE, BUILD_MODEL, BUILD_STRICT, LABELS and MODEL_VOLUMES (arrays)."""
        labels = {
            "org.opencontainers.image.title": IMAGE_NAME,
            "org.opencontainers.image.description": (
                "zh_en on TorchServe: STAND-IN with random weights, not a translation model"
                if self.standin
                else f"zh_en on TorchServe: {self.model_label}"
            ),
            "io.zh-en.model": self.model_label,
            "io.zh-en.standin": "true" if self.standin else "false",
            **self.labels,
        }
        label_args = " ".join(shlex.quote(f"--label={key}={value}") for key, value in labels.items())
        volume_args = " ".join(shlex.quote(f"--volume={volume}") for volume in self.volumes)
        return (
            f"IMAGE={shlex.quote(self.tag)}\n"
            f"BUILD_MODEL={shlex.quote(self.model_arg)}\n"
            "BUILD_STRICT=1\n"
            f"LABELS=({label_args})\n"
            f"MODEL_VOLUMES=({volume_args})\n"
        )


def plan(model: str, image: str | None = None, revision: str = DEFAULT_REVISION) -> ImagePlan:
    if model == SYNTHETIC:
        tag = image or STANDIN_TAG
        if "standin" not in tag:
            raise ImagePlanError(
                f"MODEL=synthetic builds the stand-in (random weights): its tag must say so, "
                f"e.g. IMAGE={STANDIN_TAG}, not IMAGE={tag}"
            )
        return ImagePlan(tag, SYNTHETIC, standin=True, model_label="synthetic stand-in")
    path = Path(model).expanduser()
    if path.exists():
        missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
        if missing:
            raise ImagePlanError(
                f"MODEL={model} is not a MarianMT model directory (missing {', '.join(missing)}); "
                "save one with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR)"
            )
        real = path.resolve()
        return ImagePlan(
            _real_tag(image),
            MOUNTED_MODEL,
            standin=False,
            model_label=f"local directory {real.name}",
            volumes=(f"{real}:{MOUNTED_MODEL}:ro",),
        )
    if model != DEFAULT_MODEL and "/" not in model:
        raise ImagePlanError(f"MODEL={model}: no such directory, and not a hub id (owner/name)")
    if not hub_reachable():
        raise ImagePlanError(
            f"cannot reach the Hugging Face hub ({hub_url()}) to download {model} at revision "
            f"{revision}, and an image must not fall back to the stand-in. Choose one:\n"
            f"  make image MODEL=/path/to/model_dir   the real model, saved with save_pretrained "
            "on a host that reaches the hub\n"
            f"  make image MODEL=synthetic            a stand-in image (random weights), tagged "
            f"{STANDIN_TAG} and labeled io.zh-en.standin=true"
        )
    return ImagePlan(_real_tag(image), model, standin=False, model_label=f"{model}@{revision}")


def _real_tag(image: str | None) -> str:
    tag = image or IMAGE_NAME
    if tag.endswith(":standin"):
        raise ImagePlanError(f"IMAGE={tag} is the stand-in's tag; name the real model's image otherwise")
    return tag


def main() -> int:
    try:
        chosen = plan(os.environ.get("MODEL") or DEFAULT_MODEL, os.environ.get("IMAGE") or None)
    except ImagePlanError as error:
        print(f"make image: {error}", file=sys.stderr)
        return 2
    print(chosen.shell(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
