"""serving.health (the HEALTHCHECK) tells whether zh_en translates, not only whether TorchServe runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving import health
from serving.swap import archive_workers
from serving.torchserve import TorchServe

pytestmark = pytest.mark.e2e


def test_health_fails_when_no_worker_can_translate_though_ping_is_healthy(
    server: TorchServe, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    version = server.client.default_version()
    workers = archive_workers(server.model_store / "zh_en_int8.mar")  # as its model config starts it
    server.client.wait_ready(version, workers=workers)
    check = ["--key-file", str(server.key_file), "--url", server.client.endpoints.inference]
    check += ["--marker", str(tmp_path / "no-drain"), "--timeout", "5"]
    assert health.main(check) == 0, capsys.readouterr().out
    (tmp_path / "no-drain").write_text("draining\n")
    assert health.main(check) == 1  # serving.graceful's drain marker wins
    (tmp_path / "no-drain").unlink()

    server.client.scale(version, 0)
    try:
        ping = server.client.ping()
        capsys.readouterr()
        assert health.main(check) == 1
        said = capsys.readouterr().out
        print(f"/ping with no worker: {ping.status_code} {ping.text.strip()}; serving.health: {said.strip()}")
        assert ping.status_code == 200 and "Healthy" in ping.text  # why /ping alone is not the check
        assert said.startswith("unhealthy")
    finally:  # the session's server, as it was
        server.client.scale(version, workers)
    server.client.wait_ready(version, workers, timeout=60)  # a synchronous scale answers just before READY
    assert health.main(check) == 0
