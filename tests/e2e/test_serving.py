"""A real TorchServe from the production config, tiny stand-in archives built by the real archiver."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from archive.tatoeba import REPO_ROOT
from serving.client import ServerError
from serving.processes import live_children, process_alive
from serving.swap import archive_model_config
from serving.torchserve import TorchServe
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.long(seconds=31)]


def test_archives_hold_handler_package_config_and_label(tiny_store: Path) -> None:
    for variant in ("fp32", "int8"):
        with zipfile.ZipFile(tiny_store / f"zh_en_{variant}.mar") as mar:
            names = set(mar.namelist())
            manifest = json.loads(mar.read("MAR-INF/MANIFEST.json"))
            assert json.loads(mar.read("standin.json"))["name"].startswith("offline stand-in")
        assert {
            "zh_en_handler.py",
            "handlers/model/translator.py",
            f"zh_en_{variant}.yaml",
            "model.safetensors",
        } <= names
        assert manifest["model"]["modelName"] == "zh_en"
        assert manifest["model"]["modelVersion"] == f"1.0-{variant}"


IMPORT_FROM_ARCHIVE = """
import json, sys
sys.path.insert(0, sys.argv[1])  # as TorchServe does: the unpacked archive first on the path
import zh_en_handler
from handlers.model import native
kernels = native.current()  # the library the archive carries, built ahead of time
loaded = {name: module.__file__ for name, module in sys.modules.items() if name.split(".")[0] == "handlers"}
loaded["kernels library"] = str(native.LIBRARY) if kernels is not None else "none"
print(json.dumps(loaded))
"""


def test_the_handler_imports_every_module_from_its_archive(tiny_store: Path, tmp_path: Path) -> None:
    """Unpacked, the archive alone must hold the handler's whole package: a module left out would
    otherwise be found in this checkout (installed in the venv) and the test would not notice."""
    with zipfile.ZipFile(tiny_store / "zh_en_int8.mar") as mar:
        mar.extractall(tmp_path)
    # The C kernels' source and the library make kernels built from it: a worker never compiles.
    for pattern in ("*.py", "*.c", "*.so"):
        shipped = sorted(str(path.relative_to(tmp_path)) for path in (tmp_path / "handlers").rglob(pattern))
        source = sorted(str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "handlers").rglob(pattern))
        assert shipped == source
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_FROM_ARCHIVE, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    loaded: dict[str, str] = json.loads(run.stdout.strip().splitlines()[-1])
    assert {"handlers.wire.parsing", "handlers.text.documents", "handlers.model.translator"} <= set(loaded)
    outside = {name: file for name, file in loaded.items() if not Path(file).is_relative_to(tmp_path)}
    assert not outside, f"imported from outside the archive: {outside}"


def test_the_worker_log_and_metrics_name_the_c_kernel_path(server: TorchServe) -> None:
    """The path auto takes on this CPU (handlers.model.native), in the worker's load line and as the
    CpuKernels dimension of the work-done counters."""
    from handlers.model import native

    expected = native.name_of(native.load("auto"))
    assert server.client.translate("内核路径的测试句子。").status_code == 200
    log = (server.workdir / "logs" / "model_log.log").read_text()
    assert re.findall(r"cpu_kernels=(\w+)", log)[-1] == expected
    pattern = (
        rf'^SentencesTranslated\{{Variant="int8",CpuKernels="{expected}",ModelName="zh_en".*\}} [0-9.]+$'
    )

    def metrics() -> str:
        return requests.get(f"{server.client.endpoints.metrics}/metrics", timeout=30).text

    # The handler reports at most once a second under continuous batching.
    wait_until(
        lambda: re.search(pattern, metrics(), re.M),
        30,
        lambda: [line for line in metrics().splitlines() if "SentencesTranslated" in line],
        interval=0.5,
    )


def test_translate_json_text_and_list(server: TorchServe) -> None:
    single = server.client.translate("汤姆不会同意的")
    assert single.status_code == 200, single.text
    body = single.json()
    assert body["variant"] == "int8" and body["version"] == "1.0-int8" and body["standin"] is True
    assert isinstance(body["translation"], str) and body["translation"]

    plain = server.client.post_raw("是那家。".encode(), "text/plain; charset=utf-8")
    assert plain.status_code == 200 and "translation" in plain.json()

    many = server.client.translate(["一", "二", "三"], num_beams=2)
    assert many.status_code == 200 and len(many.json()["translations"]) == 3


def test_bad_input_gets_4xx_and_the_worker_keeps_serving(server: TorchServe) -> None:
    cases = [
        (b'{"text": ""}', "application/json", 400, "empty"),
        (b'{"text": ', "application/json", 400, "not valid JSON"),
        (b'{"text": "\\ud800"}', "application/json", 400, "lone UTF-16 surrogate"),
        (b"[" * 5000, "application/json", 400, "not valid JSON"),
        (json.dumps({"text": "a" * 5001}).encode(), "application/json", 413, "max_chars_per_text"),
        (json.dumps({"text": ["长" * 1300] * 16}).encode(), "application/json", 413, "max_chars_per_request"),
        (json.dumps({"text": "好。" * 501}).encode(), "application/json", 413, "max_sentences_per_request"),
        (
            json.dumps({"text": "你好。" * 200, "num_beams": 8, "max_new_tokens": 256}).encode(),
            "application/json",
            413,
            "max_decode_tokens_per_request",
        ),
        (json.dumps({"text": "こんにちは、元気ですか"}).encode(), "application/json", 422, "Japanese"),
        (json.dumps({"text": "你好", "format": "pdf"}).encode(), "application/json", 400, "format"),
        (b"\xff\xfe\xfd", "text/plain", 400, "UTF-8"),
        (json.dumps({"text": ["a"] * 129}).encode(), "application/json", 413, "max_texts_per_request"),
        (json.dumps({"text": "a", "num_beams": 99}).encode(), "application/json", 422, "num_beams"),
        ("汤姆".encode(), "application/x-www-form-urlencoded", 415, "Content-Type"),  # what curl -d sends
    ]
    for body, content_type, status, fragment in cases:
        response = server.client.post_raw(body, content_type)
        assert response.status_code == status, (body, response.text)
        assert fragment in response.json()["message"]
    assert server.client.translate("汤姆不会同意的").status_code == 200


def test_version_swap_through_the_management_api(server: TorchServe) -> None:
    client = server.client
    workers = archive_model_config(server.model_store / "zh_en_fp32.mar")["minWorkers"]
    # The archive's model config wins over initial_workers (serving.swap relies on it): one more
    # asked, and under step a second worker would stall the first (docs/SCHEDULING.md).
    client.register("zh_en_fp32.mar", initial_workers=workers + 1)
    try:
        # TorchServe answers a synchronous register from the worker's "loaded" event, a moment before
        # it marks that worker READY (WorkerThread.setState notifies first): poll, then count them all.
        client.wait_ready("1.0-fp32", workers, timeout=60)
        assert client.workers("1.0-fp32") == workers
        assert set(client.versions()) == {"1.0-int8", "1.0-fp32"}
        assert client.default_version() == "1.0-int8"
        assert client.translate("你好", version="1.0-fp32").json()["variant"] == "fp32"

        client.set_default("1.0-fp32")
        assert client.default_version() == "1.0-fp32"
        assert client.translate("你好").json()["variant"] == "fp32"
    finally:
        client.set_default("1.0-int8")
        client.unregister("1.0-fp32")
    assert client.versions() == ["1.0-int8"]
    assert client.translate("你好").json()["variant"] == "int8"
    with pytest.raises(ServerError, match="404"):
        client.describe(version="1.0-fp32")


def test_stop_leaves_no_processes(tiny_store: Path, tmp_path: Path) -> None:
    server = TorchServe(tiny_store, tmp_path, models=["zh_en_fp32.mar"])
    with server:
        layout = archive_model_config(tiny_store / "zh_en_fp32.mar")
        server.client.wait_ready(server.client.default_version(), layout["minWorkers"])  # loaded
        workers = server.worker_pids()
        assert len(workers) == layout["minWorkers"]
        # A step worker forks its partitions once it has loaded the model; they must go with it.
        partitions = [child for worker in workers for child in live_children(worker)]
        step = layout["handler"].get("torchserve_batching", "continuous") == "continuous"
        assert len(partitions) == (layout["handler"]["step_partitions"] * len(workers) if step else 0)
        pids = [server.java_pid(), *workers, *partitions]
        # Its workers' sockets are its own: the module's server runs beside it with workers 9000/9001 too.
        for worker in server.worker_pids():
            cmdline = Path(f"/proc/{worker}/cmdline").read_bytes().split(b"\0")
            assert Path(cmdline[cmdline.index(b"--sock-name") + 1].decode()).parent == server.socket_dir
        assert server.client.translate("你好").json()["variant"] == "fp32"
    for pid in pids:
        assert pid is not None
        assert not process_alive(pid), f"process {pid} outlived the server"
