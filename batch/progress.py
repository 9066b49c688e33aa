"""Progress of a long job: a bar on a terminal, a plain line every few seconds in a log."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

PLAIN_EVERY_SECONDS = 5.0


class Progress:
    """Counts what finished (characters for the ETA, sentences for the rate) against the total."""

    def __init__(self, total_chars: int, done_chars: int, shards: int, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total_chars, self.done_chars = max(total_chars, 1), done_chars
        self.shards, self.shards_done = shards, 0
        self.sentences = 0
        self.started = self.printed = time.monotonic()
        self.start_chars = done_chars
        self._bar: Any = None
        if self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total_chars, initial=done_chars, unit="char", unit_scale=True, file=self.stream
            )

    def advance(self, chars: int, sentences: int) -> None:
        self.done_chars += chars
        self.sentences += sentences
        self.shards_done += 1
        if self._bar is not None:
            self._bar.update(chars)
            self._bar.set_postfix_str(f"{self.sentences} sentences, {self.rate():.1f} sentences/s")
        elif time.monotonic() - self.printed >= PLAIN_EVERY_SECONDS or self.shards_done == self.shards:
            self.printed = time.monotonic()
            print(self.line(), file=self.stream, flush=True)

    def rate(self) -> float:
        return self.sentences / max(time.monotonic() - self.started, 1e-9)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        chars_rate = (self.done_chars - self.start_chars) / elapsed
        left = (self.total_chars - self.done_chars) / chars_rate if chars_rate > 0 else float("inf")
        eta = "?" if left == float("inf") else time.strftime("%H:%M:%S", time.gmtime(left))
        return (
            f"batch: {self.shards_done}/{self.shards} shards, {self.sentences} sentences, "
            f"{self.rate():.1f} sentences/s, {100 * self.done_chars / self.total_chars:.0f}% of the text, "
            f"ETA {eta}"
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
