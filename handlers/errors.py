"""What text and model code refuse, said in their own terms.

They never know about HTTP: the wire edge (handlers.wire.errors.client_error) gives each kind
its status in one table, so a change of status is one line there.
"""

from __future__ import annotations


class Refused(Exception):
    """A text or request that will not be translated; the message names the problem for the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class OverLimit(Refused):
    """More than a limit allows: characters, tokens, sentences or decode steps."""


class UnsupportedLanguage(Refused):
    """A text in a language the model does not translate (Japanese or Korean, say)."""


class OutOfRange(Refused):
    """An option outside what this request can have (more alternatives than its beams, say)."""


class TooManyProtectedSpans(Refused):
    """More spans to keep verbatim than the private-use slots that carry them through the model."""


class Unparsable(Refused):
    """A text that is not in the format the request declared (an SRT cue without its timings, say)."""


class TooCostly(Refused):
    """A text whose text stages (splitting, markup, rendering) ran past the request's time budget."""
