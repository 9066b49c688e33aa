"""A pytest plugin: the LibreTranslate test modules' front door, `door` and its client `key`.

tests/e2e/test_libretranslate.py and test_libretranslate_integrations.py name it in `pytest_plugins`
(beside tests.e2e.shared_fleet, whose replica it stands before); each module gets a door of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from serving.front_door import FrontDoor
from serving.replica_set import Fleet
from tests.e2e.conftest_fleet import front_door, replica_port


@pytest.fixture(scope="module")
def door_and_key(
    shared_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FrontDoor, str]]:
    """A front door per module before the session's replica, with one key. Its limits are high:
    schemathesis sends hundreds of requests from one address with one key."""
    limits = {"rate_per_second": 100, "burst": 100, "address_rate_per_second": 1000, "address_burst": 1000}
    run_dir = tmp_path_factory.mktemp("libretranslate-door")
    port = replica_port(shared_fleet)
    with front_door(run_dir, [port], probe_timeout_s=2, probe_window_s=3, **limits) as made:
        made[0].wait_healthy()
        yield made


@pytest.fixture(scope="module")
def door(door_and_key: tuple[FrontDoor, str]) -> FrontDoor:
    return door_and_key[0]


@pytest.fixture(scope="module")
def key(door_and_key: tuple[FrontDoor, str]) -> str:
    return door_and_key[1]
