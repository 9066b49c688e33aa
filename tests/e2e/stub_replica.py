"""A stub replica that answers 200, one per module: a pytest plugin that
tests/e2e/test_front_door_parsers.py and test_front_door_limits.py name in `pytest_plugins` (a plugin
module, so that conftest_fleet, which they import, is not one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest_fleet import Stub


@pytest.fixture(scope="module")
def stub() -> Iterator[Stub]:
    made = Stub(200)
    yield made
    made.close()
