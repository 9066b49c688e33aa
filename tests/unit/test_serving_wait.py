"""serving.wait stops at a failed initial load instead of polling a model that will never register."""

from __future__ import annotations

from pathlib import Path

from serving.wait import TAIL_BYTES, load_failure

BANNER = "2026-11-28T12:05:58,100 [INFO ] main org.pytorch.serve.ModelServer - \nTorchserve version: 0.12.0"
FAILED = (
    "2026-11-28T12:05:59,423 [WARN ] main org.pytorch.serve.ModelServer - "
    "Failed to load model: zh_en_int8.mar\n"
    "java.io.IOException: Cannot create directory '/tmp/models/39737b8d'.\n"
    "\tat org.apache.commons.io.FileUtils.mkdirs(FileUtils.java:2361) ~[model-server.jar:?]"
)
STARTED = "2026-11-28T12:05:59,508 [INFO ] main org.pytorch.serve.ModelServer - Metrics API bind to: ..."


def test_the_failed_load_of_the_latest_start_is_named_with_its_cause(tmp_path: Path) -> None:
    log = tmp_path / "ts_log.log"
    log.write_text("\n".join([BANNER, FAILED, STARTED]))
    assert load_failure(log) == (
        "zh_en_int8.mar failed to load: java.io.IOException: Cannot create directory '/tmp/models/39737b8d'."
    )


def test_a_failure_of_an_earlier_start_is_not_this_starts(tmp_path: Path) -> None:
    log = tmp_path / "ts_log.log"
    log.write_text("\n".join([BANNER, FAILED, STARTED, BANNER, STARTED]))
    assert load_failure(log) is None


def test_only_the_logs_end_is_read_and_it_holds_the_latest_start(tmp_path: Path) -> None:
    log = tmp_path / "ts_log.log"
    log.write_text("x" * (TAIL_BYTES + 10) + "\n" + "\n".join([BANNER, FAILED, STARTED]))
    failure = load_failure(log)
    assert failure is not None and failure.startswith("zh_en_int8.mar failed to load")


def test_no_log_yet_is_no_failure(tmp_path: Path) -> None:
    assert load_failure(tmp_path / "missing.log") is None
