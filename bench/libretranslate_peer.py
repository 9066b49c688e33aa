"""LibreTranslate 1.9.6 serving the stand-in through an Argos package: a served peer for bench.load.

    python -m bench.libretranslate_peer --prepare      # venv + package only (make libretranslate-peer)
    python -m bench.run_all --loads int8:4:100 libretranslate:4:100 libretranslate-tuned:4:100

A benchmark peer, never a serving option. Three pieces, each cached under build/libretranslate/:

- **Install**: LibreTranslate 1.9.6 as its users install it (`pip install libretranslate==1.9.6`) in
  its own venv (its pins, numpy<2 among them, conflict with ours), pip constrained to the torch
  already installed here so nothing can pull another torch build.
- **Package**: the model directory converted to CTranslate2 int8 (bench.ctranslate2_peer's cached
  conversion, no vocabulary map in use, as Argos loads it) and packed as an .argosmodel: model/,
  sentencepiece.model (the source side's; Argos has one tokenizer per package), minisbd/ with the
  stand-in sentence splitter (bench.sbd_standin: the real zh-hans MiniSBD model is a download),
  metadata.json zh -> en, the language names marked "stand-in". Installed by Argos's own
  install_from_path into a packages directory of the run's own (ARGOS_PACKAGES_DIR, XDG_* homes).
- **Server**: `libretranslate --host 127.0.0.1 --port P --load-only zh,en` run through
  bench/libretranslate_launcher.py, whose one change forces each sentence to its reference length
  (that module's docstring says exactly how). No model is ever downloaded: --update-models and
  --force-update-models (LT_UPDATE_MODELS, LT_FORCE_UPDATE_MODELS) are off by default, but 1.9.6
  still fetches the package index at start when fewer than two packages are installed
  (libretranslate/init.py), so the index (ARGOS_PACKAGE_INDEX) is a local empty list: the update
  finds nothing, says "Cannot update models (normal if you're offline)", and the installed package
  serves.

Two settings (SETTINGS): as shipped (waitress 4 threads, CTranslate2 1 inter x 0 intra threads: its
own default, 4 OpenMP threads by its docs) and tuned for this 2-core host (CTranslate2 2 inter x 1 intra: two
translations at once, one core each; waitress threads as shipped). Beam 4 is Argos's default
(ARGOS_BEAM_SIZE), so the rung only runs at beam 4, against ours at beam 4. Caches: LibreTranslate's
translation cache is off unless asked for (--translation-cache); Argos keeps the previous request's
paragraphs, which answers a text drawn twice in a row (about 1 request in 2,000 here), as shipped.
Argos logs every decoded batch at INFO (waitress turns logging on), as shipped, into the run's log.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bench import ctranslate2_peer, sbd_standin
from bench.cli import BenchCli, Progress
from bench.common import MODELS_DIR, is_standin, write_result
from bench.cpu_account import tree_role
from bench.load import LoadSpec, load_label, reference_lengths, run_load
from serving.ports import free_port

VERSION = "1.9.6"
PEER_DIR = MODELS_DIR.parent / "libretranslate"
LAUNCHER = Path(__file__).with_name("libretranslate_launcher.py")
BEAMS = 4  # Argos Translate's default beam size (argostranslate/settings.py, ARGOS_BEAM_SIZE)
PACKAGE_NAME = "translate-zh_en-standin"
NOTICE = "peer, not a serving option"
say = Progress("libretranslate")


class PeerUnavailable(RuntimeError):
    """LibreTranslate's venv cannot be made or started; the message says why."""


@dataclass(frozen=True)
class LibreTranslateSetting:
    """One way to run it: waitress threads (--threads; None: its default, 4) and CTranslate2's
    threads as Argos reads them (ARGOS_INTER_THREADS, ARGOS_INTRA_THREADS; None: Argos's 1 and 0)."""

    name: str
    threads: int | None = None
    inter_threads: int | None = None
    intra_threads: int | None = None

    def arguments(self) -> list[str]:
        return ["--threads", str(self.threads)] if self.threads else []

    def environment(self) -> dict[str, str]:
        settings = {"ARGOS_INTER_THREADS": self.inter_threads, "ARGOS_INTRA_THREADS": self.intra_threads}
        return {key: str(value) for key, value in settings.items() if value is not None}


SETTINGS = {
    "libretranslate": LibreTranslateSetting("libretranslate"),
    "libretranslate-tuned": LibreTranslateSetting("libretranslate-tuned", inter_threads=2, intra_threads=1),
}


def venv_python(peer_dir: Path = PEER_DIR) -> Path:
    return peer_dir / "venv" / "bin" / "python"


def installed(peer_dir: Path = PEER_DIR) -> bool:
    return (peer_dir / "venv" / f".installed-{VERSION}").exists()


def install(peer_dir: Path = PEER_DIR) -> Path:
    """LibreTranslate's venv python, installing it first unless the cache holds this version."""
    python, marker = venv_python(peer_dir), peer_dir / "venv" / f".installed-{VERSION}"
    if marker.exists():
        return python
    import torch

    peer_dir.mkdir(parents=True, exist_ok=True)
    constraints = peer_dir / "constraints.txt"
    # The torch installed here (the local CPU build): pip may never resolve a CUDA build instead.
    constraints.write_text(f"torch=={torch.__version__}\n")
    say(f"installing libretranslate=={VERSION} into {python.parent.parent} (a few minutes, once)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(python.parent.parent)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--constraint", str(constraints)]
    result = subprocess.run([*pip, f"libretranslate=={VERSION}"], check=False)
    if result.returncode != 0:
        raise PeerUnavailable(f"pip could not install libretranslate=={VERSION} (exit {result.returncode})")
    marker.touch()
    return python


def package_metadata() -> dict[str, Any]:
    return {
        "package_version": "1.0",
        "argos_version": "1.9.0",
        "from_code": "zh",
        "from_name": "Chinese (stand-in)",
        "to_code": "en",
        "to_name": "English (stand-in)",
        "type": "translate",
        "links": [],
    }


def build_package(
    model_dir: Path, peer_dir: Path = PEER_DIR, ct2_dir: Path = ctranslate2_peer.CACHE_DIR
) -> Path:
    """The .argosmodel for `model_dir`, cached under its CTranslate2 conversion's name (its key) and
    a digest of what this module adds (the splitter, the metadata)."""
    converted = ctranslate2_peer.convert(model_dir, ct2_dir)
    added = hashlib.sha256(sbd_standin.model_bytes() + json.dumps(package_metadata()).encode())
    target = peer_dir / "packages" / f"{converted.name}-{added.hexdigest()[:8]}.argosmodel"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as staging:
        root = Path(staging) / PACKAGE_NAME
        shutil.copytree(converted, root / "model")
        shutil.copy(model_dir / "source.spm", root / "sentencepiece.model")
        sbd_standin.write_model(root / "minisbd" / "zh-hans-standin.onnx")
        (root / "metadata.json").write_text(json.dumps(package_metadata(), indent=2) + "\n")
        (root / "README.md").write_text(
            f"Stand-in zh -> en package built by bench.libretranslate_peer from {model_dir.name} "
            f"({'random weights: not a translation' if is_standin(model_dir) else 'a model directory'}); "
            f"{NOTICE}.\n"
        )
        partial = Path(staging) / target.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:
            for path in sorted(root.rglob("*")):
                archive.write(path, path.relative_to(root.parent))
        partial.rename(target)  # whole or not at all
    return target


def argos_environment(home: Path) -> dict[str, str]:
    """Argos's and LibreTranslate's homes inside `home`, and a package index that downloads nothing."""
    index = home / "index"
    index.mkdir(parents=True, exist_ok=True)
    (index / "index.json").write_text("[]\n")
    return {
        "ARGOS_PACKAGES_DIR": str(home / "packages"),
        "ARGOS_PACKAGE_INDEX": index.as_uri() + "/",
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "HOME": str(home),
    }


def install_package(python: Path, package: Path, environment: Mapping[str, str]) -> None:
    """Argos's own installer puts the package where that environment's Argos looks."""
    code = "import sys; from argostranslate import package; package.install_from_path(sys.argv[1])"
    subprocess.run([str(python), "-c", code, str(package)], env={**os.environ, **environment}, check=True)


@dataclass
class LibreTranslateServer:
    """A running LibreTranslate on 127.0.0.1 (see `serve`)."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    lengths_file: Path | None = None

    def missed_lengths(self, ignore: tuple[str, ...] = ()) -> list[str]:
        """Paragraphs the launcher found no reference length for (they decoded freely)."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [
            line
            for line in lines
            if line.startswith("length lookup missed") and not any(i in line for i in ignore)
        ]


@contextmanager
def serve(
    setting: LibreTranslateSetting,
    package: Path,
    workdir: Path,
    lengths: Mapping[str, int] | None = None,
    python: Path | None = None,
    timeout: float = 180.0,
) -> Iterator[LibreTranslateServer]:
    """LibreTranslate with `package` installed in `workdir`, each text in `lengths` forced to its length."""
    python = python or venv_python()
    if not python.exists():
        raise PeerUnavailable(
            f"no LibreTranslate venv at {python.parent.parent}: run make libretranslate-peer"
        )
    environment = argos_environment(workdir / "argos")
    install_package(python, package, environment)
    lengths_file = None
    if lengths is not None:
        lengths_file = workdir / "lengths.json"
        lengths_file.write_text(json.dumps(dict(lengths), ensure_ascii=False))
        environment["ZH_EN_LT_LENGTHS"] = str(lengths_file)
    port = free_port()
    command = [str(python), str(LAUNCHER), "--host", "127.0.0.1", "--port", str(port), "--load-only", "zh,en"]
    log = workdir / f"{setting.name}.log"
    say(f"starting {setting.name}: {' '.join(command[2:] + setting.arguments())} {setting.environment()}")
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, *setting.arguments()],
            env={**os.environ, **environment, **setting.environment(), "PYTHONUNBUFFERED": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    server = LibreTranslateServer(f"http://127.0.0.1:{port}", process, log, lengths_file)
    try:
        _wait_ready(server, timeout)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: LibreTranslateServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise PeerUnavailable(
                f"LibreTranslate exited ({server.process.returncode}): {server.log.read_text()[-2000:]}"
            )
        try:
            if requests.get(server.url + "/languages", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    raise PeerUnavailable(
        f"LibreTranslate not answering after {timeout:.0f}s: {server.log.read_text()[-2000:]}"
    )


def run_peer_load(
    setting: LibreTranslateSetting,
    users: int,
    duration: str,
    model_dir: Path,
    results: Path,
    command: str,
    sentences: int = LoadSpec.sentences,
) -> dict[str, Any]:
    """One Locust run against LibreTranslate in `setting`, written like ours (bench.load)."""
    python = install()
    package = build_package(model_dir)
    lengths = reference_lengths(sentences, model_dir) if is_standin(model_dir) else None
    label = load_label(setting.name, BEAMS, users)
    with (
        tempfile.TemporaryDirectory(prefix="zh_en_lt_") as workdir,
        serve(setting, package, Path(workdir), lengths, python) as server,
    ):
        spec = LoadSpec(
            server.url,
            users=users,
            spawn_rate=users,
            duration=duration,
            num_beams=BEAMS,
            sentences=sentences,
            label=label,
            api="libretranslate",
        )
        summary = run_load(
            spec,
            results,
            model_dir,
            command,
            serving_pids=lambda: [server.process.pid],
            cpu_roles=tree_role("LibreTranslate", lambda: [server.process.pid]),
        )
        missed = server.missed_lengths(ignore=("你好。",))  # bench.load's probe
    if missed:
        raise RuntimeError(
            f"{label}: {len(missed)} paragraphs decoded without their reference length: {missed[:3]}"
        )
    # The same result, named for the report's load table and saying what ran.
    summary = {
        **summary,
        "variant": setting.name,
        "decoder": "ctranslate2 int8",
        **describe(setting, lengths),
    }
    write_result(label, summary, results, command)
    return summary


def describe(setting: LibreTranslateSetting, lengths: Mapping[str, int] | None) -> dict[str, Any]:
    return {
        "version": f"libretranslate {VERSION}",
        "peer": {
            "notice": NOTICE,
            "setting": setting.name,
            "waitress_threads": setting.threads or "default (4)",
            "ctranslate2_inter_threads": setting.inter_threads or "default (1)",
            "ctranslate2_intra_threads": setting.intra_threads
            or "default (0: CTranslate2's own, 4 by its docs)",
            "beam_size": f"default ({BEAMS})",
            "lengths": "reference lengths, forced by bench/libretranslate_launcher.py" if lengths else "free",
            "sentence_splitter": "stand-in MiniSBD model (bench/sbd_standin.py)",
        },
    }


def main(argv: list[str] | None = None) -> int:
    cli = BenchCli("libretranslate_peer", __doc__, model="synthetic", results_dir=True)
    cli.parser.add_argument("--prepare", action="store_true", help="install and build the package, then stop")
    cli.parser.add_argument("--setting", choices=sorted(SETTINGS), default="libretranslate")
    cli.parser.add_argument("--users", type=int, default=100)
    cli.parser.add_argument("--duration", default="30s")
    args = cli.parse(argv)
    install()
    package = build_package(cli.model_dir())
    say(f"package {package}")
    if args.prepare:
        return 0
    summary = run_peer_load(
        SETTINGS[args.setting], args.users, args.duration, cli.model_dir(), args.results_dir, cli.command
    )
    return 0 if summary["failures"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
