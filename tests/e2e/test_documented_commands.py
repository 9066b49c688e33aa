"""The Dockerfile, the Makefile and the README must run the same commands; the build step really runs.

No Docker engine exists on our machines, so this is how the image's steps get tested.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from archive.tatoeba import REPO_ROOT
from serving import fleet as fleet_cli
from serving.torchserve import TorchServe

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=34)]

SERVE = (
    "torchserve --start --ncs --model-store model_store --ts-config config/config.properties "
    "--models zh_en_int8.mar"
)


def dockerfile_instructions(keyword: str) -> list[str]:
    text = (REPO_ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line[len(keyword) :].strip() for line in text.splitlines() if line.startswith(keyword + " ")]


def test_readme_makefile_and_image_start_the_same_server() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert SERVE in readme
    makefile = (REPO_ROOT / "Makefile").read_text()
    variables = {"$(BIN)/": "", "$(STORE)": "model_store", "$(CONFIG)": "config/config.properties"}
    for variable, value in variables.items():
        makefile = makefile.replace(variable, value)
    assert SERVE in makefile
    (cmd,) = dockerfile_instructions("CMD")
    argv = json.loads(cmd)
    assert Path(argv[0]).name == "torchserve"
    assert " ".join(["torchserve", *[arg for arg in argv[1:] if arg != "--foreground"]]) == SERVE
    (entrypoint,) = dockerfile_instructions("ENTRYPOINT")
    assert json.loads(entrypoint) == [".venv/bin/python", "-m", "serving.graceful", "--"]
    assert "make archives" in readme


def test_image_build_step_is_make_archives_and_it_builds_both(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The image's step, run: both archives unpacked, their weights one file, served in place."""
    runs = dockerfile_instructions("RUN")
    (build,) = [run for run in runs if run.startswith("make ")]
    assert re.fullmatch(r"make archives MODEL=\$\{MODEL\} STRICT=\$\{STRICT\} UNPACK=1", build)
    store = tmp_path / "store"
    subprocess.run(
        ["make", "archives", f"MODEL={tiny_model_dir}", "STRICT=1", f"STORE={store}", "UNPACK=1"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    for variant in ("fp32", "int8"):
        manifest = json.loads((store / f"zh_en_{variant}.mar" / "MAR-INF" / "MANIFEST.json").read_text())
        assert manifest["model"]["modelVersion"] == f"1.0-{variant}"
    fp32, int8 = (store / f"zh_en_{variant}.mar" / "model.safetensors" for variant in ("fp32", "int8"))
    assert fp32.samefile(int8)

    with TorchServe(store, tmp_path / "ts") as server:  # the README's --models zh_en_int8.mar
        assert server.client.translate("你好。").json()["variant"] == "int8"
        server.client.register("zh_en_fp32.mar", initial_workers=1)  # a version swap's first step
        assert server.client.translate("你好。", version="1.0-fp32").json()["variant"] == "fp32"
        # Served in place: no extracted copy of the weights anywhere under the server's directory.
        assert not list((tmp_path / "ts").rglob("*.safetensors"))


def test_the_systemd_unit_runs_the_same_server_under_the_graceful_supervisor() -> None:
    unit = (REPO_ROOT / "deploy" / "zh-en-torchserve.service").read_text().replace("\\\n", " ")
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    supervisor, _, server = exec_start.removeprefix("ExecStart=").partition(" -- ")
    assert supervisor.split() == ["/opt/zh_en/.venv/bin/python", "-m", "serving.graceful"]
    argv = server.split()
    assert Path(argv[0]).name == "torchserve" and "--foreground" in argv
    assert " ".join(["torchserve", *[arg for arg in argv[1:] if arg != "--foreground"]]) == SERVE
    assert "KillMode=mixed" in unit  # SIGTERM reaches the supervisor alone, not the workers mid-batch
    # The README's relative paths, run from the state directory (key_file.json is written there):
    # config/ and model_store/ are the checkout's, bound read-only.
    assert "WorkingDirectory=/var/lib/zh_en" in unit.splitlines() and "StateDirectory=zh_en" in unit
    (binds,) = [line for line in unit.splitlines() if line.startswith("BindReadOnlyPaths=")]
    assert sorted(binds.removeprefix("BindReadOnlyPaths=").split()) == [
        "/opt/zh_en/config:/var/lib/zh_en/config",
        "/opt/zh_en/model_store:/var/lib/zh_en/model_store",
    ]


UNITS = ("zh-en-torchserve.service", "zh-en-fleet.service")
# What every unit sets (SECURITY.md); MemoryDenyWriteExecute would stop the JVM's JIT.
HARDENING = (
    "UMask=0077", "ProtectSystem=strict", "ProtectHome=true", "PrivateTmp=true", "PrivateDevices=true",
    "NoNewPrivileges=true", "CapabilityBoundingSet=", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    "RestrictNamespaces=true", "LockPersonality=true", "ProtectKernelTunables=true",
    "ProtectKernelModules=true", "ProtectKernelLogs=true", "ProtectControlGroups=true",
)  # fmt: skip


@pytest.mark.parametrize("name", UNITS)
def test_the_units_are_sandboxed_with_code_and_venv_read_only(name: str) -> None:
    lines = (REPO_ROOT / "deploy" / name).read_text().splitlines()
    for setting in HARDENING:
        assert setting in lines, f"{name}: {setting}"
    assert not [line for line in lines if line.startswith("MemoryDenyWriteExecute=")]
    writable = [
        path for line in lines if line.startswith("ReadWritePaths=") for path in line.split("=", 1)[1].split()
    ]
    assert not [path for path in writable if path.lstrip("-").startswith("/opt/zh_en")], writable


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verifies_the_units(name: str, tmp_path: Path) -> None:
    """Offline: the unit parses and its directives are known to this systemd (252 here).
    ExecStart must name an executable, so the venv's path is pointed at this checkout's."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: the systemd package)")
    unit = (REPO_ROOT / "deploy" / name).read_text().replace("/opt/zh_en/.venv/bin/", f"{sys.prefix}/bin/")
    (tmp_path / name).write_text(unit)
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    security = subprocess.run(
        [analyze, "security", "--offline=true", str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    exposure = re.search(r"Overall exposure level for \S+: (\d+\.\d)", security.stdout)
    assert exposure is not None, security.stdout[-500:] + security.stderr
    assert float(exposure.group(1)) <= 3.5, security.stdout  # 8.0 ("EXPOSED") before the hardening


def test_the_production_unit_runs_the_front_door_service_with_persistent_keys() -> None:
    unit = (REPO_ROOT / "deploy" / "zh-en-fleet.service").read_text().replace("\\\n", " ")
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = exec_start.removeprefix("ExecStart=").split()
    assert argv[:3] == ["/opt/zh_en/.venv/bin/python", "-m", "serving.fleet"]
    args = fleet_cli.parser().parse_args(argv[3:])
    assert args.command == "run" and args.listen == "0.0.0.0:8080"
    assert str(args.dir).startswith("/var/lib/zh_en/") and "StateDirectory=zh_en" in unit  # keys.map lives on
    assert "KillMode=mixed" in unit
