"""A time budget for one request's text stages (plan, render), checked inside their loops.

Every pattern and loop over text here is linear in its input (docs/OPERATIONS.md, "Bounded cost of
untrusted text", lists them), but a future pattern may slip. The budget is what still holds then:
a request whose text stages run past text_budget_ms is refused with a 422 (TooCostly) and the
worker goes on with the rest of its batch. Nothing waits for TorchServe to kill the worker, which
would lose every request batched with it.

The mechanism is a deadline checked between units of work (lines, sentences, pieces, tags, parser
rules), not a timer that interrupts: CPython's `re` cannot be interrupted mid-match (signals are
handled between bytecodes), and a thread cannot be stopped from outside. So a check can only come
between two calls, and the bound is the budget plus the longest single call made between checks:
one linear regex or parser step over at most one text, milliseconds (the fuzz campaign,
tests/fuzz_text.py, measures them). The deadline lives in a context variable rather than in every
signature: the checks sit deep in splitting, protection, markup and parser callbacks, and a
worker handles one request's stage at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from handlers.errors import TooCostly


@dataclass
class Deadline:
    at: float  # time.monotonic() past which the stage is refused
    seconds: float
    stage: str  # what runs: "splitting and markup", "rendering"
    where: str = "the text"  # which text of the request is being worked on: "text 2"

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise TooCostly(
                f"{self.where} is too costly to process: its {self.stage} took more than the "
                f"{self.seconds * 1000:.0f} ms budget (text_budget_ms); send it in smaller texts, "
                "with less markup"
            )


_CURRENT: ContextVar[Deadline | None] = ContextVar("text_deadline", default=None)


@contextmanager
def text_budget(seconds: float, stage: str) -> Iterator[Deadline]:
    """Within the block, check() raises TooCostly once `seconds` have passed."""
    deadline = Deadline(time.monotonic() + seconds, seconds, stage)
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


def check() -> None:
    """Raise TooCostly when the current request's text budget is spent (no budget: never)."""
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.check()


def check_every(index: int) -> None:
    """check(), once every 1,024 steps of a loop over characters (a step costs nanoseconds)."""
    if not index & 1023:
        check()
