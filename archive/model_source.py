"""Resolve --model (hub id, local directory, or `synthetic`) to a local model directory.

A hub model is downloaded at a pinned commit (--revision, default archive.hub.DEFAULT_REVISION).
When the hub cannot be reached and the user did not pass --strict, fall back
to the offline stand-in and say so loudly: an archive of random weights must
never be mistaken for the real model. The image build always passes --strict
(archive/image_plan.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from archive.hub import DEFAULT_MODEL, DEFAULT_REVISION, REQUIRED_FILES, SYNTHETIC, hub_reachable
from archive.standin import Size, build_standin

__all__ = ["DEFAULT_MODEL", "DEFAULT_REVISION", "SYNTHETIC", "ModelSourceError", "resolve_model_dir"]


class ModelSourceError(RuntimeError):
    """The model could not be resolved; the message says what to do."""


def resolve_model_dir(
    source: str,
    work_dir: Path,
    standin_size: Size = "full",
    strict: bool = False,
    revision: str = DEFAULT_REVISION,
) -> Path:
    if source == SYNTHETIC:
        return build_standin(work_dir / f"standin-{standin_size}", standin_size)
    path = Path(source).expanduser()
    if path.exists():
        return _checked_local_dir(path)
    try:
        # One copy per revision: a copy of another commit is never reused for this one.
        return _download(source, revision, work_dir / f"{source.replace('/', '--')}@{revision}")
    except Exception as error:  # any hub failure means the same fallback
        if strict:
            raise ModelSourceError(
                f"could not load {source!r} at revision {revision} from the Hugging Face hub "
                f"({_first_line(error)}); pass a local model directory (MODEL=<dir>), or "
                "MODEL=synthetic for the offline stand-in"
            ) from error
        _announce_fallback(source, error)
        return build_standin(work_dir / f"standin-{standin_size}", standin_size)


def _checked_local_dir(path: Path) -> Path:
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise ModelSourceError(
            f"{path} is not a MarianMT model directory: missing {missing}; "
            "save one with model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR)"
        )
    return path.resolve()


def _download(repo_id: str, revision: str, target: Path) -> Path:
    """Load `revision` from the hub once and save a local copy; later builds reuse it offline."""
    if all((target / name).is_file() for name in REQUIRED_FILES):
        return target
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    # Without a route to the hub, transformers retries for most of a minute: look once, then use
    # only the local Hugging Face cache (which raises at once when the model is not there either).
    offline = not hub_reachable()
    tokenizer = AutoTokenizer.from_pretrained(repo_id, revision=revision, local_files_only=offline)
    model = AutoModelForSeq2SeqLM.from_pretrained(repo_id, revision=revision, local_files_only=offline)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(target)
    model.save_pretrained(target)
    return target


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0][:160]}"


def _announce_fallback(source: str, error: Exception) -> None:
    bar = "!" * 78
    print(
        f"\n{bar}\n"
        f"!! Could not reach the Hugging Face hub for {source!r}:\n"
        f"!!   {_first_line(error)}\n"
        "!! Building the OFFLINE STAND-IN instead: opus-mt-zh-en's architecture with\n"
        "!! RANDOM weights. It serves, batches and benchmarks like the real model, but\n"
        "!! its output is NOT a translation, and every response says so.\n"
        "!! For the real model: run where the hub is reachable, or pass MODEL=<dir>.\n"
        "!! Use STRICT=1 (--strict) to fail instead of falling back.\n"
        f"{bar}\n",
        file=sys.stderr,
        flush=True,
    )
