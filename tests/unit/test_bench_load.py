"""bench.load's guard: Locust traffic goes to this machine only, refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.load import LoadSpec, run_load


@pytest.mark.parametrize(
    "host", ["http://10.0.0.1:8080", "http://example.com", "http://127.0.0.1.example.com"]
)
def test_load_refuses_other_hosts(host: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="only targets this machine"):
        run_load(LoadSpec(host), tmp_path)
    assert not any(tmp_path.iterdir())  # refused before Locust ran or wrote anything
