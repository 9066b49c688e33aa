"""The one polling helper: the first truthy value comes back, and a timeout names what never came."""

from __future__ import annotations

import itertools

import pytest

from tests.waiting import WaitTimeout, wait_until


def test_the_first_truthy_value_is_returned_after_polling() -> None:
    answers = itertools.chain([0, "", None], itertools.repeat("ready"))
    assert wait_until(lambda: next(answers), 5, "ready", interval=0.001) == "ready"


def test_a_timeout_says_what_never_came_with_the_last_state_asked_then() -> None:
    seen = [0]

    def never() -> bool:
        seen[0] += 1
        return False

    with pytest.raises(WaitTimeout, match=r"not within 0.05 s: polled \d+ times"):
        wait_until(never, 0.05, lambda: f"polled {seen[0]} times", interval=0.01)
    assert seen[0] >= 2
