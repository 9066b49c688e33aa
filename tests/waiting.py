"""Tests wait on conditions, never on a fixed sleep: one polling helper for every test layer.

A condition is asked again every `interval` seconds until it gives something truthy, which is
returned; past `timeout` the test fails with `what` (a callable is asked only then, so it can
show the last state seen). A fixed sleep is either too short on a loaded machine or wasted on an
idle one; polling costs what the condition costs and no more.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

Value = TypeVar("Value")


class WaitTimeout(AssertionError):
    """A condition stayed false for the whole timeout."""


def wait_until(
    condition: Callable[[], Value],
    timeout: float,
    what: str | Callable[[], object],
    interval: float = 0.05,
) -> Value:
    """`condition()`'s first truthy value, polled every `interval` s for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            shown = what() if callable(what) else what
            raise WaitTimeout(f"not within {timeout:g} s: {shown}")
        time.sleep(interval)
    return value
