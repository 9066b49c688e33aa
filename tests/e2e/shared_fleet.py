"""The session's one real fleet replica, shared by the front-door test modules (issue 25).

A pytest plugin: tests/e2e/test_fleet.py and test_libretranslate.py name it in `pytest_plugins`, so
`shared_fleet` is one session fixture whichever of them runs first: one TorchServe start, not one per
module. Each module puts its own front door in front of it (test_fleet.py uses the fleet's own).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from serving.nginx_conf import FrontDoorConfig
from serving.ports import free_port
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import FLEET_BURST, FLEET_RATE


@pytest.fixture(scope="session")
def shared_fleet(tiny_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One replica of the tiny int8 archive behind test_fleet.py's front door, for the whole session.

    Other modules put their own front door before the same replica (conftest_fleet.front_door over
    `replica_port`). A test that changes the replica (scales it) puts it back as it found it.
    """
    door = FrontDoorConfig(
        listen=f"127.0.0.1:{free_port()}",
        rate_per_second=FLEET_RATE,
        burst=FLEET_BURST,
        probe_timeout_s=2,
        probe_window_s=3,
    )
    running = Fleet.create(tmp_path_factory.mktemp("fleet"), tiny_store, door=door)
    running.start(1)
    try:
        yield running
    finally:
        running.stop()
